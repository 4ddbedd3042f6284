"""A stand-in accelerator for testing device handling without one.

:class:`DeviceTensor` holds its data in host memory but behaves like a tensor on an accelerator where it matters
for correctness: the host cannot read it directly (``.numpy()``, ``.tolist()``, ``.item()``, ``float()``, ``int()``
raise as they do for a CUDA tensor), and only an explicit ``.cpu()`` / ``.to("cpu")`` gives a plain host tensor.
:func:`device_loader` gives ``torch.load`` as it behaves with ``map_location`` naming an accelerator: every
tensor of the payload arrives as a :class:`DeviceTensor`. :func:`strict_rng_setter` gives ``torch.set_rng_state``
as it behaves with such a tensor (it takes host byte tensors only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

_HOST_READS = {torch.Tensor.numpy, torch.Tensor.tolist, torch.Tensor.item, torch.Tensor.__array__,
               torch.Tensor.__float__, torch.Tensor.__int__, torch.Tensor.__bool__}
_MOVES = {torch.Tensor.cpu, torch.Tensor.to}


class DeviceTensor(torch.Tensor):
    """A tensor "on the accelerator": operations work and give such tensors, direct host reads raise, ``.cpu()`` and
    ``.to("cpu")`` are host tensors."""

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        if func in _HOST_READS:
            raise TypeError(f"can't convert fake:0 device type tensor to a host value ({func.__name__}); use "
                            "Tensor.cpu() to copy the tensor to host memory first")
        with torch._C.DisableTorchFunctionSubclass():
            result = func(*args, **(kwargs or {}))
        if func in _MOVES and isinstance(result, torch.Tensor) and result.device.type == "cpu":
            return result.as_subclass(torch.Tensor)  # a copy to the host is an ordinary tensor
        return on_device(result)  # anything computed from it stays on the device


def on_device(tree: Any) -> Any:
    """``tree`` with every tensor (in dicts, lists and tuples) turned into a :class:`DeviceTensor`."""
    if isinstance(tree, torch.Tensor):
        return tree.as_subclass(DeviceTensor)
    if isinstance(tree, dict):
        return {key: on_device(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(on_device(value) for value in tree)
    return tree


def device_loader(real_load: Callable[..., Any]) -> Callable[..., Any]:
    """A ``torch.load`` whose tensors all land on the stand-in accelerator, whatever ``map_location`` says."""

    def load(*args: Any, **kwargs: Any) -> Any:
        kwargs["map_location"] = "cpu"
        return on_device(real_load(*args, **kwargs))

    return load


def strict_rng_setter(real_set: Callable[[torch.Tensor], None]) -> Callable[[torch.Tensor], None]:
    """``torch.set_rng_state`` that, like the real one given a CUDA tensor, refuses anything but a host tensor."""

    def set_rng_state(new_state: torch.Tensor) -> None:
        if type(new_state) is not torch.Tensor or new_state.device.type != "cpu":
            raise TypeError("RNG state must be a torch.ByteTensor in host memory")
        real_set(new_state)

    return set_rng_state
