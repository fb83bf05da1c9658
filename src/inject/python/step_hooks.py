"""What a Python program's own machinery says about its steps, for `memseal run`.

Run inside the traced program (embedded into libmemseal_run_python.so, so the program's environment
needs no memseal package) once `import torch` has finished. Each signal goes to `report(kind,
object_id, name)`, memseal's runtime (src/inject/framework_steps.h), which decides which source
ends the steps:
  2  an optimizer's step() returned (torch.optim's global step hooks: every optimizer, made before
     or after this runs; LBFGS's closure calls are inside one step);
  1  a DataLoader gave a batch (the previous iteration is over);
  0  a call of the outermost nn.Module returned (PyTorch's global module hooks; an evaluation pass
     that calls the model without a loader is seen only through them, so they stay).

Nothing here may fail the program: a hook that cannot report stays silent.
"""

import sys
import threading


def install(report):
    import torch
    from torch.nn.modules import module as nn_module
    from torch.optim.optimizer import (register_optimizer_step_post_hook,
                                       register_optimizer_step_pre_hook)
    from torch.utils.data import dataloader

    depth = threading.local()
    compiling = getattr(getattr(torch, "compiler", None), "is_compiling", lambda: False)

    def signal(kind, object_id, name):
        try:
            report(kind, object_id, name)
        except Exception:  # noqa: BLE001 (the program must not notice)
            pass

    # Module calls inside an optimizer's step (LBFGS's closure) are not the program's steps.
    def before_optimizer_step(optimizer, args, kwargs):
        depth.in_step = getattr(depth, "in_step", 0) + 1

    def after_optimizer_step(optimizer, args, kwargs):
        depth.in_step = max(getattr(depth, "in_step", 1) - 1, 0)
        signal(2, id(optimizer), type(optimizer).__name__)

    register_optimizer_step_pre_hook(before_optimizer_step)
    register_optimizer_step_post_hook(after_optimizer_step)

    iterator = dataloader._BaseDataLoaderIter
    next_batch = iterator.__next__

    def __next__(self):
        batch = next_batch(self)
        dataset = getattr(self, "_dataset", self)
        signal(1, id(dataset), "DataLoader over " + type(dataset).__name__)
        return batch

    __next__.__wrapped__ = next_batch
    iterator.__next__ = __next__

    # Module calls nest: only the outermost one's end is a signal. The hooks may be installed in
    # the middle of a call (from memseal's own thread), and a call begun before them runs no end
    # hook: until those calls are over (`stale`, looked up on the stack only as a call starts at
    # depth 0), no call is the outermost. Code that torch.compile traces sees hooks that do
    # nothing (the compiled module's own call is the outermost one).
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
        known = getattr(depth, "value", None)
        if known is None or (known == 0 and depth.stale):
            depth.stale = calls_on_stack() - 1
            known = 0
        depth.value = known + 1

    def after_call(module, args, output):
        if compiling():
            return
        known = getattr(depth, "value", None)
        if not known:
            return
        depth.value = known - 1
        if depth.value == 0 and not depth.stale and not getattr(depth, "in_step", 0):
            signal(0, id(module), type(module).__name__)

    nn_module.register_module_forward_pre_hook(before_call)
    nn_module.register_module_forward_hook(after_call, always_call=True)
