"""How close `memseal.fit` comes to the largest size that truly fits: per case, the prediction from
a few small sizes, the prediction the step's own peaks alone would give (one model, no phases), and
the largest size whose measured peak fits, found by bisection with every point measured.

    python bench/python/fit_accuracy.py [--cases NAME,...]

Each case makes its model inside the step, so the fit and every measurement track all of its
bytes. Prints a Markdown table (BENCHMARKS.md)."""
import argparse
import time

import torch

import memseal
from memseal import _memseal


def adam_mlp(width):
    state = {}

    def step(batch, i):
        if not state:
            torch.manual_seed(0)
            state["model"] = torch.nn.Sequential(
                torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                torch.nn.ReLU(), torch.nn.Linear(width, 10))
            state["optimizer"] = torch.optim.Adam(state["model"].parameters())
        loss = torch.nn.functional.cross_entropy(state["model"](torch.randn(batch, width)),
                                                 torch.randint(0, 10, (batch,)))
        state["optimizer"].zero_grad()
        loss.backward()
        state["optimizer"].step()
    return step


def sgd_mlp():
    state = {}

    def step(batch, i):
        if not state:
            torch.manual_seed(0)
            state["model"] = torch.nn.Sequential(
                torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                torch.nn.ReLU(), torch.nn.Linear(512, 10))
            state["optimizer"] = torch.optim.SGD(state["model"].parameters(), lr=0.01)
        state["optimizer"].zero_grad()
        state["model"](torch.randn(batch, 256)).pow(2).mean().backward()
        state["optimizer"].step()
    return step


def attention():
    state = {}

    def step(length, i):
        if not state:
            torch.manual_seed(0)
            state["project"] = torch.nn.Linear(64, 192)
        project = state["project"]
        project.zero_grad()
        q, k, v = project(torch.randn(length, 64)).chunk(3, -1)
        scores = torch.softmax(q @ k.T / 8.0, -1)
        (scores @ v).pow(2).mean().backward()
    return step


def small_cnn():
    state = {}

    def step(batch, i):
        if not state:
            torch.manual_seed(0)
            state["model"] = torch.nn.Sequential(
                torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                torch.nn.Linear(32 * 32 * 32, 10))
            state["optimizer"] = torch.optim.Adam(state["model"].parameters())
        loss = torch.nn.functional.cross_entropy(state["model"](torch.randn(batch, 3, 32, 32)),
                                                 torch.randint(0, 10, (batch,)))
        state["optimizer"].zero_grad()
        loss.backward()
        state["optimizer"].step()
    return step


CASES = {
    # name: (make the step, sizes measured, budget, what the size is)
    "mlp-adam-small-sizes": (lambda: adam_mlp(1024), (16, 32, 64, 128), 120 << 20, "batch"),
    "mlp-adam-across-the-bend": (lambda: adam_mlp(512), (16, 64, 256, 512, 1024), 48 << 20, "batch"),
    "mlp-sgd": (sgd_mlp, (64, 128, 192, 256), 64 << 20, "batch"),
    "attention-seq-len": (attention, (64, 128, 192, 256, 320), 64 << 20, "sequence length"),
    "cnn-adam": (small_cnn, (4, 8, 16, 32), 256 << 20, "batch"),
}


def measured_peak(make_step, size):
    report = memseal.fit(make_step(), sizes=(size, size + 1, size + 2), budget=1 << 40)
    return report.points[0][1]


def largest_fitting(make_step, fits, fails, usable):
    while fails - fits > 1:
        middle = (fits + fails) // 2
        if measured_peak(make_step, middle) <= usable:
            fits = middle
        else:
            fails = middle
    return fits


def run_case(name):
    make_step, sizes, budget, unit = CASES[name]
    began = time.perf_counter()
    report = memseal.fit(make_step(), sizes=sizes, budget=budget)
    fit_seconds = time.perf_counter() - began
    step_only = _memseal.fit_peaks([(size, peak, []) for size, peak in report.points], budget, 0.10,
                                   0.03)
    predicted = report.predicted_max_size
    usable = budget * 0.9
    upper = max(predicted or 0, step_only.predicted_max_size or 0, sizes[-1]) * 2
    while measured_peak(make_step, upper) <= usable:
        upper *= 2
    truth = largest_fitting(make_step, sizes[-1], upper, usable)
    changes = " → ".join(f"{memseal_phase(phase)} ({size})" for size, phase in report.phase_changes)

    def miss(value, refusal):
        if value is None:
            return f"refused ({refusal.split(':')[0]})"
        return f"{value} ({100 * (value - truth) / truth:+.1f}%)"

    return (f"| {name} | {unit} {', '.join(map(str, sizes))} | {budget >> 20} MiB | "
            f"{miss(predicted, report.refusal)} | "
            f"{miss(step_only.predicted_max_size, step_only.refusal)}, {step_only.model} | "
            f"{truth} | {changes or report.model} | {fit_seconds:.1f} s |")


def memseal_phase(phase):
    kind, _, rest = phase.partition(":")
    if not rest:
        return kind
    index, _, node = rest.partition(":")
    return f"{kind} {node}#{index}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default=",".join(CASES))
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| case | sizes measured | budget | memseal fit (vs measured) | step's own model "
          "(vs measured) | measured largest | limiting phase (from size) | fit time |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        print(run_case(name), flush=True)


if __name__ == "__main__":
    main()
