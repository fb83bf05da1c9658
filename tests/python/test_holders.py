"""One finding per mistake and the Python object that holds it, on the patterns that split a cause
or hid its holder: a kept CNN output, a buffer written in place with grad on, hooks that keep their
closures, partials and inputs, views in a cache, functools.lru_cache; and a bounded LRU cache that
turns over, which is not a leak however long its entries keep being replaced; and a search that
leaves nothing alive behind it."""

import gc
import weakref

import pytest
import torch

import memseal
from conftest import load_case


def check(case, steps=30, warmup=5):
    return memseal.check(case.step, steps=steps, warmup=warmup, on_leak="none")


def holders(report, finding=0):
    return [h.description for h in report.holders if h.finding == finding]


def test_a_kept_cnn_output_is_one_finding_with_every_saved_activation_as_a_part():
    case = load_case("kept_cnn.py")
    report = check(case)
    assert report.categories == ["grad-enabled-inference"], report.text()
    ops = {part.site.op for part in report.findings[0].parts}
    # Convolution, batch norm, ReLU, pooling outputs and the input the first convolution saved.
    assert {"aten::max_pool2d_with_indices", "aten::clamp_min"} <= ops, ops
    assert len(report.findings[0].parts) >= 5, report.text()
    assert holders(report)[0].startswith("list `predictions` (global of kept_cnn.py)"), report.text()
    case.predictions.clear()


def test_a_kept_residual_network_output_is_one_finding():
    case = load_case("kept_resnet.py")
    report = check(case)
    assert report.categories == ["grad-enabled-inference"], report.text()
    ops = {part.site.outer_op for part in report.findings[0].parts}
    # Activations with history of their own (convolutions, ReLUs) and without (dropout's mask,
    # layer norm's statistics) are all what the kept output's graph saved.
    assert {"aten::conv2d", "aten::relu", "aten::dropout", "aten::layer_norm"} <= ops, ops
    case.scores.clear()


def test_a_buffer_written_in_place_while_training_names_the_buffer():
    case = load_case("memory_slots.py")
    report = check(case)
    assert report.categories == ["autograd-graph-retained"], report.text()
    described = holders(report)
    assert len(described) == 1 and described[0].startswith(
        "tensor `net.slots` (buffer of Memory, global of memory_slots.py), whose grad_fn "
        "CopySlices keeps"), report.text()


def test_a_buffer_written_in_place_with_grad_on_is_named_as_the_graph_holder():
    case = load_case("kv_buffer.py")
    report = check(case)
    assert report.categories == ["grad-enabled-inference"], report.text()
    described = holders(report)
    assert len(described) == 1 and described[0].startswith(
        "tensor `decoder.k_cache` (buffer of Decoder, global of kv_buffer.py), whose grad_fn "
        "CopySlices keeps"), report.text()
    assert report.holders[0].via_graph


def test_a_closure_in_a_forward_pre_hook_names_the_module_path_and_the_hook():
    case = load_case("hook_closure.py")
    report = check(case)
    assert report.categories == ["tensors-retained"], report.text()
    assert holders(report) == [
        "closure variable `scale` of forward pre-hook `scale_inputs` of `model[2]` "
        f"({len(case.model[2]._forward_pre_hooks)} forward pre-hooks registered; global of "
        "hook_closure.py)"], report.text()


def test_a_partial_registered_as_a_hook_is_named_through_the_partial():
    case = load_case("partial_hook.py")
    report = check(case)
    assert report.categories == ["tensors-retained"], report.text()
    described = holders(report)
    assert len(described) == 1, report.text()
    assert described[0].startswith(
        "an argument of functools.partial, the forward pre-hook `add_bias` of `model[0]`"), described


def test_a_bound_method_as_a_hook_names_the_attribute_of_its_object():
    case = load_case("method_hook.py")
    report = check(case)
    assert report.categories == ["tensors-retained"], report.text()
    assert holders(report) == [
        "list `.outputs` of the Recorder behind forward hook `Recorder.record` of `model[0]` "
        "(1 forward hook registered; global of method_hook.py)"], report.text()


def test_an_attribute_of_an_object_without_a_dict_yet_is_named():
    # Python 3.11+ keeps a new instance's attributes inline: no __dict__ refers to the list.
    class Keeper:
        def __init__(self):
            self.kept = []

    global keeper
    keeper = Keeper()

    def step(i):
        keeper.kept.append(torch.randn(64))

    report = memseal.check(step, steps=30, warmup=5, on_leak="none")
    assert holders(report) == ["list `keeper.kept` of Keeper (global of test_holders.py)"], \
        report.text()
    keeper.kept.clear()


class LossKeeper:
    kept = []


def test_a_class_attribute_is_named_through_the_class():
    # A class shows its attributes only through a read-only proxy: the dict that holds the list is
    # never the class's __dict__ (a Trainer subclass keeping its losses in a class-level list).
    model = torch.nn.Linear(8, 1)

    def step(i):
        loss = model(torch.randn(4, 8)).sum()
        loss.backward()
        LossKeeper.kept.append(loss)

    report = memseal.check(step, steps=30, warmup=5, on_leak="none")
    assert report.categories == ["autograd-graph-retained"], report.text()
    assert holders(report) == [
        "list `LossKeeper.kept`, a class attribute (global of test_holders.py)"
    ], report.text()
    LossKeeper.kept.clear()


def test_inputs_stored_per_module_by_a_hook_are_one_finding_with_the_dict_as_holder():
    case = load_case("hook_inputs.py")
    report = check(case)
    assert report.categories == ["tensors-retained"], report.text()
    described = holders(report)
    assert len(described) == 1, report.text()
    assert described[0].startswith("list `captured[…]` (global of hook_inputs.py; under at least "), \
        described
    case.captured.clear()


def test_views_kept_in_a_cache_name_the_cache_not_cpp():
    case = load_case("view_cache.py")
    report = check(case)
    assert report.categories == ["tensors-retained"], report.text()
    described = holders(report)
    # Tuples of views under the dict's keys: one holder, the entries of `views`.
    assert len(described) == 1 and described[0].startswith(
        "tuple `views[…]` (global of view_cache.py; under at least "), report.text()
    case.views.clear()


def test_an_unbounded_lru_cache_is_found_and_named(monkeypatch):
    monkeypatch.setenv("MEMSEAL_TEST_LRU_MAXSIZE", "none")
    case = load_case("lru_cache.py")
    report = check(case, steps=60)
    assert report.categories == ["tensors-retained"], report.text()
    described = holders(report)
    assert len(described) == 1 and described[0].startswith(
        "functools.lru_cache of `positional_table` ("), described
    assert "no maxsize" in described[0] and "global of lru_cache.py" in described[0], described
    case.positional_table.cache_clear()


@pytest.mark.parametrize("steps", [200, 400])
def test_a_bounded_lru_cache_that_turns_over_is_not_a_leak(monkeypatch, steps):
    monkeypatch.setenv("MEMSEAL_TEST_LRU_MAXSIZE", "100")
    case = load_case("lru_cache.py")
    report = check(case, steps=steps)
    assert not report.leak, report.text()
    assert case.positional_table.cache_info().currsize == 100  # full, and evicting
    case.positional_table.cache_clear()


def test_a_search_leaves_nothing_alive_once_the_searched_function_returns():
    # A search from inside a loop (as `memseal run` searches at a step boundary) reads the running
    # frames' locals; once the function that built its outputs up returns, they must be freed by
    # reference counting alone (the garbage collector off: a cycle left by the search would keep
    # them until its next full pass, and a pass's build-up would look held for the whole run).
    from types import SimpleNamespace

    from memseal import _holders, _live_sample

    layer = torch.nn.Linear(16, 64)
    first_output = []

    def search(outputs):
        finding = SimpleNamespace(
            category="grad-enabled-inference", tensor=SimpleNamespace(grad_fn="AddmmBackward0"),
            freed=None, site=SimpleNamespace(frames=[]),
            parts=[SimpleNamespace(storage_addresses=[outputs[0].untyped_storage().data_ptr()],
                                   site=SimpleNamespace(frames=[]))])
        sample = _live_sample.live_tensors([finding])
        try:
            holders = _holders.holders_of([finding], sample)
        finally:
            sample.clear()
        assert [h.description.split(" (")[0] for h in holders] == ["list `outputs`"]

    def evaluate():
        outputs = []
        for batch in range(6):
            outputs.append(layer(torch.randn(4, 16)))
            if batch == 3:
                search(outputs)
        first_output.append(weakref.ref(outputs[0]))

    was_enabled = gc.isenabled()
    gc.disable()
    try:
        evaluate()
        assert first_output[0]() is None
    finally:
        if was_enabled:
            gc.enable()


def test_a_finding_whose_parts_sit_in_two_containers_names_both_whatever_the_heap_order():
    # The storages of a finding's first part all come first on the heap (made earlier, or younger
    # in the collector's order): a sample of the first ones met would name the first container
    # alone. The sample takes storages of every part in turn.
    from types import SimpleNamespace

    from memseal import _holders, _live_sample

    kept = {"inputs": [torch.randn(4, 4) for _ in range(12)],
            "activations": [torch.randn(4, 4) for _ in range(12)]}

    def part(tensors):
        return SimpleNamespace(storage_addresses=[t.untyped_storage().data_ptr() for t in tensors],
                               site=SimpleNamespace(frames=[]))

    finding = SimpleNamespace(
        category="tensors-retained", tensor=SimpleNamespace(grad_fn=None), freed=None,
        site=SimpleNamespace(frames=[]), parts=[part(kept["inputs"]), part(kept["activations"])])
    sample = _live_sample.live_tensors([finding])
    try:
        sampled = {t.untyped_storage().data_ptr() for t in sample.tensors[0]}
        addresses = {name: {t.untyped_storage().data_ptr() for t in kept[name]} for name in kept}
        assert sampled & addresses["inputs"] and sampled & addresses["activations"], addresses
        described = [h.description for h in _holders.holders_of([finding], sample)]
    finally:
        sample.clear()
    assert len(described) == 1 and described[0].startswith("list `kept[…]` ("), described
    assert "under at least 2 keys" in described[0], described
