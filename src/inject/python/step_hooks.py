"""What a Python program's own machinery says about its steps, for `memseal run`.

Run inside the traced program (embedded into libmemseal_run_python.so, so the program's environment
needs no memseal package) once `import torch` has finished. Each signal goes to `report(kind,
object_id, name)`, memseal's runtime (src/inject/framework_steps.h), which decides which source
ends the steps:
  2  an optimizer's step() returned (torch.optim's global step hooks: every optimizer, made before
     or after this runs; LBFGS's closure calls are inside one step);
  1  a DataLoader gave a batch (the previous iteration is over);
  0  a call of the outermost nn.Module began (PyTorch's global module hooks; an evaluation pass
     that calls the model without a loader is seen only through them, so they stay). A module in
     eval mode is another object than in training mode: its evaluation pass is a phase of its own.
     A module with neither parameters nor submodules (a loss function such as nn.NLLLoss called
     beside the model, an activation) is no model, and its calls are no steps.

Nothing here may fail the program: a hook that cannot report stays silent.
"""

import sys
import threading


def install(report):
    """Installs the hooks; each signal goes to report(kind, object_id, name)."""
    import torch

    # Per thread: the module calls under way (value), those begun before the hooks (stale), and
    # the optimizer steps under way (in_step).
    state = threading.local()
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    def signal(kind, object_id, name):
        try:
            report(kind, object_id, name)
        except Exception:  # noqa: BLE001 (the program must not notice)
            pass

    _watch_optimizers(signal, state)
    _watch_loaders(signal)
    _watch_module_calls(signal, state, compiling)


def _watch_optimizers(signal, state):
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)

    # Module calls inside an optimizer's step (LBFGS's closure) are not the program's steps.
    def before_optimizer_step(optimizer, args, kwargs):
        state.in_step = getattr(state, "in_step", 0) + 1

    def after_optimizer_step(optimizer, args, kwargs):
        state.in_step = max(getattr(state, "in_step", 1) - 1, 0)
        signal(2, id(optimizer), type(optimizer).__name__)

    register_optimizer_step_pre_hook(before_optimizer_step)
    register_optimizer_step_post_hook(after_optimizer_step)


def _watch_loaders(signal):
    from torch.utils.data import dataloader

    iterator = dataloader._BaseDataLoaderIter
    next_batch = iterator.__next__

    def __next__(self):
        batch = next_batch(self)
        dataset = getattr(self, "_dataset", self)
        signal(1, id(dataset), "DataLoader over " + type(dataset).__name__)
        return batch

    __next__.__wrapped__ = next_batch
    iterator.__next__ = __next__


def _watch_module_calls(signal, state, compiling):
    from torch.nn.modules import module as nn_module

    # Module calls nest: only the outermost one's start is a signal (the iteration before it is
    # over, and what it made and did not keep is freed: a step that ended after the call would end
    # with the call's activations live, and what a loop keeps would be harder to tell apart from
    # them). The hooks may be installed in the middle of a call (from memseal's own thread), and a
    # call begun before them runs no end hook: until those calls are over (`stale`, looked up on the
    # stack only as a call starts at depth 0), no call is the outermost. Code that torch.compile
    # traces sees hooks that do nothing (the compiled module's own call is the outermost one).
    call_code = nn_module.Module._call_impl.__code__

    def calls_on_stack():
        frame, calls = sys._getframe(1), 0
        while frame is not None:
            calls += frame.f_code is call_code
            frame = frame.f_back
        return calls

    def before_call(module, args):
        if compiling():
            return
        known = getattr(state, "value", None)
        if known is None or (known == 0 and state.stale):
            state.stale = calls_on_stack() - 1
            known = 0
        state.value = known + 1
        if known == 0 and not state.stale and not getattr(state, "in_step", 0) and \
                (module._parameters or module._modules):
            name = type(module).__name__
            if module.training:
                signal(0, 2 * id(module), name)
            else:
                signal(0, 2 * id(module) + 1, name + " in eval mode")

    def after_call(module, args, output):
        if compiling():
            return
        known = getattr(state, "value", None)
        if not known:
            return
        state.value = known - 1

    nn_module.register_module_forward_pre_hook(before_call)
    nn_module.register_module_forward_hook(after_call, always_call=True)
