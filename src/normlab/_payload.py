"""Pickling for runs handed to helper processes: CPU tensors travel as their raw bytes.

A training run sent to a helper (:func:`normlab.train.train_mlps_fast`) is a small model, the
data and the trained state coming back: a dozen tensors of a few thousand numbers. torch's own
pickling writes every storage through a legacy ``torch.save`` into a buffer, which for such a
payload costs milliseconds each way, on the critical path of a lab request. Here a plain CPU
tensor or parameter is written as ``(bytes, dtype, shape, requires_grad)`` instead, and rebuilt
with :func:`torch.frombuffer`: the same bits, a fraction of the time.

What this does not carry is refused (:class:`pickle.PicklingError`) or left to torch's pickling,
never silently changed:

- two tensors on one storage (views of each other): writing each on its own would break the
  sharing, so the payload is refused (the caller trains on a thread instead);
- tensor subclasses, other devices and layouts, and tensors or parameters with attributes of
  their own: torch's pickling.

Example::

    >>> import torch
    >>> from normlab import _payload
    >>> w = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    >>> back = _payload.loads(_payload.dumps({"w": w}))["w"]
    >>> type(back).__name__, back.shape, torch.equal(back, w)
    ('Parameter', torch.Size([2, 3]), True)
"""

from __future__ import annotations

import io
import pickle
from typing import Any

import torch
from torch import nn

__all__ = ["dumps", "loads"]


def _tensor(raw: bytes, dtype: torch.dtype, shape: tuple[int, ...], grad: bool) -> torch.Tensor:
    if raw:
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)  # owns its (writable) copy
        t = flat.view(dtype).reshape(shape)
    else:  # frombuffer refuses an empty buffer
        t = torch.empty(shape, dtype=dtype)
    return t.requires_grad_(grad) if grad else t


def _parameter(raw: bytes, dtype: torch.dtype, shape: tuple[int, ...], grad: bool) -> nn.Parameter:
    return nn.Parameter(_tensor(raw, dtype, shape, False), requires_grad=grad)


class _Pickler(pickle.Pickler):
    def __init__(self, file: io.BytesIO) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._storages: set[int] = set()  # data pointers of the storages written so far

    def reducer_override(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is not torch.Tensor and kind is not nn.Parameter:
            return NotImplemented
        if obj.device.type != "cpu" or obj.layout != torch.strided or obj.is_quantized:
            return NotImplemented
        if getattr(obj, "__dict__", None):  # attributes set on the tensor: torch keeps them
            return NotImplemented
        storage = obj.untyped_storage()
        if storage.nbytes():
            if storage.data_ptr() in self._storages:
                raise pickle.PicklingError(
                    "two tensors share a storage; this payload keeps only separate tensors"
                )
            self._storages.add(storage.data_ptr())
        data = obj.detach().contiguous()  # (numel,) bytes in row-major order
        raw = data.reshape(-1).view(torch.uint8).numpy().tobytes() if data.numel() else b""
        rebuild = _parameter if kind is nn.Parameter else _tensor
        return rebuild, (raw, data.dtype, tuple(data.shape), obj.requires_grad)


def dumps(obj: Any) -> bytes:
    """Pickle ``obj``, writing plain CPU tensors and parameters as raw bytes.

    Raises:
        pickle.PicklingError: two tensors in ``obj`` share a storage (or ``obj`` does not
            pickle).
    """
    buffer = io.BytesIO()
    _Pickler(buffer).dump(obj)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """Unpickle what :func:`dumps` wrote (plain :func:`pickle.loads`)."""
    return pickle.loads(data)
