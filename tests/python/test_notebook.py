"""memseal in IPython and Jupyter: the reports' HTML cards (_repr_html_), `%load_ext memseal` with
%%memseal_check and %memseal_watch (IPython's own test shell), and a notebook run by a real
kernel (nbclient)."""

import linecache

import pytest
import torch

import memseal

IPython = pytest.importorskip("IPython")

LEAKY_CELL = """
loss = model(torch.randn(4, 8)).sum()
loss.backward()
total = total + loss
"""

HEALTHY_CELL = """
loss = model(torch.randn(4, 8)).sum()
loss.backward()
total = total + loss.item()
"""


def _fragment_checks(html, *expected):
    assert html.startswith('<div class="memseal-fragment">')
    assert "<html" not in html and "<body" not in html and "<script" not in html
    # Every style rule applies inside the fragment only: the notebook around it is left alone.
    style = html[html.index("<style>") + len("<style>"):html.index("</style>")]
    for rule in style.split("}"):
        selectors = rule.split("{")[0].strip()
        if selectors and not selectors.startswith("@"):
            for selector in selectors.split(","):
                assert selector.strip().startswith(".memseal-fragment"), selector
    for text in expected:
        assert text in html, text


def test_a_leak_report_renders_as_the_pages_cards(case_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("case_losses_list", case_path("losses_list.py"))
    case = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(case)
    report = memseal.check(case.step, steps=15, warmup=3, on_leak="none")
    assert report.leak
    _fragment_checks(report._repr_html_(), report.findings[0].category, "finding-card")


def test_peak_and_fit_reports_render_as_cards():
    model = torch.nn.Linear(64, 64)

    def step(_):
        model(torch.randn(32, 64)).sum().backward()

    _fragment_checks(memseal.explain(step, model=model)._repr_html_(), "What the peak holds")

    def sized(size, _):
        model(torch.randn(size, 64)).sum().backward()

    fit = memseal.fit(sized, sizes=(8, 16, 32, 64), budget="1GiB")
    _fragment_checks(fit._repr_html_(), "How far the size can grow")


@pytest.fixture
def shell():
    from IPython.testing.globalipapp import get_ipython

    ip = get_ipython()  # IPython's test shell, started once per process
    ip.run_line_magic("load_ext", "memseal")
    ip.run_cell("import torch\nmodel = torch.nn.Linear(8, 1)\ntotal = 0")
    yield ip
    ip.run_line_magic("unload_ext", "memseal")
    ip.run_cell("del model, total")


def test_memseal_check_runs_the_cell_as_the_loop_body(shell):
    report = shell.run_cell_magic("memseal_check", "--steps 30 --warmup 5", LEAKY_CELL)
    assert report.leak and report.categories == ["autograd-graph-retained"]
    assert report.steps == 30
    # The variables are the notebook's: the cell ran 30 times in its namespace.
    assert shell.user_ns["total"].grad_fn is not None

    shell.run_cell("total = 0")
    healthy = shell.run_cell_magic("memseal_check", "--steps 30 --warmup 5", HEALTHY_CELL)
    assert not healthy.leak
    assert isinstance(shell.user_ns["total"], float)


def test_memseal_check_names_the_cell_and_the_notebooks_variable(shell):
    number = shell.execution_count
    report = shell.run_cell_magic("memseal_check", "--steps 30 --warmup 5", LEAKY_CELL)
    # The cell as IPython's tracebacks call it, not a temporary file, and the line of the add.
    cell_lines = [linecache.getline(frame.file, frame.line).strip()
                  for frame in report.findings[0].site.frames
                  if frame.file == f"Cell In[{number}]"]
    assert cell_lines == ["total = total + loss"], report.text()
    # The variable the notebook keeps it in, not the module IPython keeps the notebook's in.
    holders = [h.description for h in report.holders if h.finding == 0]
    assert len(holders) == 1 and holders[0].startswith(
        "tensor `total` (a variable of the notebook), whose grad_fn"), report.text()


def test_memseal_check_shows_the_cells_traceback_and_no_report(shell):
    result = shell.run_cell("%%memseal_check --steps 10 --warmup 2\nraise KeyError('no batch')\n")
    assert isinstance(result.error_in_exec, KeyError)
    assert result.result is None


def test_memseal_check_bad_options_are_usage_errors(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="--steps"):
        shell.run_cell_magic("memseal_check", "--steps ten", HEALTHY_CELL)
    with pytest.raises(UsageError, match="must exceed --warmup"):
        shell.run_cell_magic("memseal_check", "--steps 6 --warmup 5", HEALTHY_CELL)


def test_memseal_watch_makes_every_cell_a_step(shell):
    shell.run_cell("%memseal_watch on --warmup 3")
    for _ in range(30):
        shell.run_cell(LEAKY_CELL)
    report = shell.run_cell("%memseal_watch off").result
    assert report.steps == 30  # the cells in between, not the two that turned it on and off
    assert report.leak and report.categories == ["autograd-graph-retained"]


def test_memseal_watch_gives_one_finding_per_cause_and_never_blames_memseal_or_python(shell):
    # The watch groups by native stack (a cell is new code on every run): frames of memseal's own
    # module and of the interpreter are folded, so one cause stays one finding.
    shell.run_cell("net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), "
                   "torch.nn.Linear(256, 10))\nouts = []")
    shell.run_cell("%memseal_watch on --warmup 3")
    for _ in range(40):
        shell.run_cell("outs.append(net(torch.randn(16, 64)))")
    report = shell.run_cell("%memseal_watch off").result
    shell.run_cell("del net, outs")
    assert report.leak and report.categories == ["grad-enabled-inference"], report.text()
    for finding in report.findings:
        for frame in finding.site.frames:
            assert frame.is_internal or not (
                "_memseal" in frame.library or "libpython" in frame.library
                or frame.file.endswith(".cpp") and "/src/" in frame.file), report.text()


def test_one_large_array_made_in_a_cell_mid_watch_is_not_the_leaks_cost(shell):
    # A cell that loads a 40 MiB array while the watch runs: resident memory jumps once. The leak
    # stays one finding, and its resident memory per step is what its steps add, not the array.
    shell.run_cell("net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), "
                   "torch.nn.Linear(256, 10))\nouts = []")
    shell.run_cell("%memseal_watch on --warmup 3")
    for i in range(60):
        shell.run_cell("outs.append(net(torch.randn(16, 64)))")
        if i == 30:
            shell.run_cell("import numpy\ntable = numpy.ones(5 << 20)")  # 40 MiB, pages touched
    report = shell.run_cell("%memseal_watch off").result
    shell.run_cell("del net, outs, table")
    assert report.leak and report.categories == ["grad-enabled-inference"], report.text()
    assert len(report.findings) == 1, report.text()
    assert report.findings[0].resident_bytes_per_step < 512 * 1024, report.text()


def test_memseal_watch_off_without_on_is_a_usage_error(shell):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="not on"):
        shell.run_line_magic("memseal_watch", "off")
    with pytest.raises(UsageError, match="invalid choice"):
        shell.run_line_magic("memseal_watch", "maybe")


def test_a_notebook_run_by_a_real_kernel_shows_the_card():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("%load_ext memseal\nimport torch\n"
                                  "model = torch.nn.Linear(8, 1)\ntotal = 0"),
        nbformat.v4.new_code_cell("%%memseal_check --steps 30 --warmup 5\n" + LEAKY_CELL),
        nbformat.v4.new_code_cell("%%memseal_check --steps 10 --warmup 2\nraise KeyError('no batch')"),
    ]
    client = nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3",
                                     allow_errors=True)
    client.execute()
    report_outputs = notebook.cells[1].outputs
    html = [output["data"]["text/html"] for output in report_outputs if "data" in output
            and "text/html" in output["data"]]
    assert len(html) == 1
    _fragment_checks(html[0], "autograd-graph-retained")
    failed = notebook.cells[2].outputs
    assert [output["output_type"] for output in failed] == ["error"]
    assert failed[0]["ename"] == "KeyError"
