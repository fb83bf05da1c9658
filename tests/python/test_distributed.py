"""memseal in a distributed job from Python: a watch in each rank names its rank (torchrun's
variables, or torch.distributed under mp.spawn), gather=True sends every rank's report to rank 0
through the store of the job's own process group, and memseal.merge gives the same merged view
from reports."""
import json
import os
import subprocess
import sys

import pytest

import memseal
from conftest import case_file

SCRIPT = case_file("ddp_watch.py")


def run_job(tmp_path, *arguments, torchrun=True):
    if torchrun:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node=2", SCRIPT, "--out", str(tmp_path), *arguments]
    else:
        command = [sys.executable, SCRIPT, "--out", str(tmp_path), *arguments]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    merged = json.loads((tmp_path / "merged.json").read_text())
    return ranks, merged, result.stderr


@pytest.mark.parametrize("torchrun", [True, False], ids=["torchrun", "mp.spawn"])
def test_a_leak_of_rank_0_is_gathered_to_rank_0_as_divergent(tmp_path, torchrun):
    arguments = ("--leak",) if torchrun else ("--leak", "--spawn", "2")
    ranks, merged, stderr = run_job(tmp_path, *arguments, torchrun=torchrun)
    assert [rank["rank"] for rank in ranks] == [0, 1]
    assert all(rank["world_size"] == 2 for rank in ranks)
    assert [rank["leak"] for rank in ranks] == [True, False]
    assert [rank["merged"] for rank in ranks] == [True, False]  # rank 0 only
    assert merged["schema"] == "memseal.merged/1"
    assert merged["findings"][0]["ranks"] == [0]
    assert merged["findings"][0]["category"] == "autograd-graph-retained"
    assert "rank 0 only" in stderr  # on_leak='warn' prints the merged view on rank 0


def test_a_rank_that_never_sends_its_report_is_missing_from_the_merged_view(tmp_path):
    # Rank 1 ends its watch without gather=True; rank 0 waits the job's store timeout (5 s here).
    ranks, merged, stderr = run_job(tmp_path, "--leak", "--silent-rank", "1")
    assert [rank["merged"] for rank in ranks] == [True, False]
    assert [rank["status"] for rank in merged["ranks"]] == ["leak", "missing"]
    assert "did not reach rank 0" in merged["ranks"][1]["missing_reason"]
    assert merged["findings"][0]["ranks"] == [0]
    assert "rank 1" in stderr and "missing" in stderr


def test_a_healthy_job_merges_to_no_leak(tmp_path):
    ranks, merged, _ = run_job(tmp_path)
    assert [rank["leak"] for rank in ranks] == [False, False]
    assert merged["verdict"] == "no_leak"
    assert [rank["status"] for rank in merged["ranks"]] == ["no_leak", "no_leak"]


def test_merge_takes_reports_json_and_files(tmp_path):
    leaky = memseal.check(lambda i, kept=[]: kept.append(__import__("torch").ones(512)), steps=20,
                          warmup=3, on_leak="none")
    healthy = memseal.check(lambda i: __import__("torch").ones(512), steps=20, warmup=3,
                            on_leak="none")
    merged = memseal.merge([leaky, healthy.to_json()])
    assert merged.world_size == 2
    assert merged.leak
    assert merged.findings[0].ranks == [0]
    assert [rank.status for rank in merged.ranks] == ["leak", "no_leak"]
    path = tmp_path / "rank-0.json"
    path.write_text(leaky.to_json())
    assert memseal.merge(tmp_path).findings[0].category == "tensors-retained"
    assert "rank 0" in memseal.merge([str(path)]).text()
    # `python -m memseal merge` is the C++ command's, with check's exit codes.
    result = subprocess.run([sys.executable, "-m", "memseal", "merge", str(tmp_path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1, result.stderr
    assert "rank 0 only" in result.stdout or "job of 1 rank" in result.stdout, result.stdout


def test_a_merged_view_writes_its_page_linking_each_ranks_page_and_shows_in_a_notebook(tmp_path):
    leaky = memseal.check(lambda i, kept=[]: kept.append(__import__("torch").ones(512)), steps=20,
                          warmup=3, on_leak="none")
    healthy = memseal.check(lambda i: __import__("torch").ones(512), steps=20, warmup=3,
                            on_leak="none")
    job = tmp_path / "job"
    job.mkdir()
    (job / "rank-0.json").write_text(leaky.to_json())
    (job / "rank-1.json").write_text(healthy.to_json())
    memseal.write_html(job / "rank-0.html", check=leaky)  # rank 1 has no page of its own
    merged = memseal.merge(job)
    merged.write_html(tmp_path / "merged.html")
    page = (tmp_path / "merged.html").read_text()
    assert "Ranks of the job" in page
    assert '<a href="job/rank-0.html"' in page
    assert 'href="job/rank-1.html"' not in page
    assert "Hover over a chart" not in page  # the merged view has no chart
    cards = merged._repr_html_()
    assert cards.startswith("<div") and "<script" not in cards and "Ranks of the job" in cards
    # Nothing written where the folder does not exist, and the error names the path.
    with pytest.raises(RuntimeError, match="missing"):
        merged.write_html(tmp_path / "missing" / "merged.html")
    assert not (tmp_path / "missing").exists()


def test_merge_refuses_what_is_not_a_report(tmp_path):
    with pytest.raises(ValueError, match="holds no rank reports"):
        memseal.merge(tmp_path)
    with pytest.raises(ValueError, match="report 0"):
        memseal.merge(['{"schema": "memseal.check/1"}'])
    with pytest.raises(TypeError):
        memseal.merge([42])
    with pytest.raises(ValueError, match="at least one"):
        memseal.merge([])


def test_gather_without_a_process_group_says_what_it_needs():
    with pytest.raises(RuntimeError, match="init_process_group"):
        with memseal.watch(gather=True, on_leak="none") as watch:
            watch.step()


def test_uneven_batches_explained_on_each_rank_merge_to_the_spread_of_their_peaks(tmp_path):
    result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                             "--nproc-per-node=2", case_file("ddp_explain.py"), "--out",
                             str(tmp_path), "--uneven"],
                            capture_output=True, text=True, timeout=300,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    merged = memseal.merge(tmp_path)
    assert [rank.status for rank in merged.ranks] == ["explained", "explained"], merged.text()
    peaks = [rank.explained_peak.peak_bytes for rank in merged.ranks]
    assert peaks[1] > peaks[0] > 0, merged.text() + result.stdout + result.stderr
    assert merged.ranks[1].explained_peak.top_role  # the role that held most of it
    assert "rank 1 highest" in merged.text(), merged.text()
    # The same from the command.
    command = subprocess.run([sys.executable, "-m", "memseal", "merge", str(tmp_path)],
                             capture_output=True, text=True, timeout=120)
    assert command.returncode == 0, command.stderr
    assert "peaks of 2 ranks explained" in command.stdout
    assert "rank 1 highest" in command.stdout
    # Which role grew most depends on what was live at each rank's peak (gloo's buckets are
    # allocated beside the step), so the text must name the role whose bytes differ most.
    high, low = (rank.explained_peak.roles for rank in merged.ranks[::-1])
    differences = {role: bytes - low.get(role, 0) for role, bytes in high.items()}
    largest = max(differences, key=differences.get)
    assert differences[largest] > 0, differences
    assert f"the largest part of the difference is {largest} (+" in command.stdout, (
        command.stdout, differences)


def test_merge_refuses_reports_of_two_jobs_unless_forced():
    import json

    def rank_of(rank, run_id):
        report = json.loads(memseal.check(lambda i: __import__("torch").ones(64), steps=12,
                                          warmup=3, on_leak="none").to_json())
        report["rank"] = {"rank": rank, "local_rank": rank, "world_size": 2, "run_id": run_id}
        return json.dumps(report)

    reports = [rank_of(0, "monday"), rank_of(1, "tuesday")]
    with pytest.raises(ValueError, match="the reports are of 2 jobs .*force=True"):
        memseal.merge(reports)
    assert memseal.merge(reports, force=True).world_size == 2
    assert memseal.merge([rank_of(0, "monday"), rank_of(1, "monday")]).world_size == 2
