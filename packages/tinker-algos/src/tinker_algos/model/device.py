"""Where the model runs and in which precision, chosen at run time.

``resolve_device()`` picks CUDA with bf16 autocast when a GPU with bf16 support is present and the
CPU in float32 otherwise. Both choices can be overridden by arguments or by the environment
variables ``OPENTINKER_DEVICE`` (``cpu``, ``cuda``, ``cuda:1``, ...) and ``OPENTINKER_PRECISION``.

Precisions:

* ``fp32`` -- float32 weights, no autocast (the CPU default; what the tests use).
* ``bf16-mixed`` -- float32 weights and optimizer state, forward passes under bf16 autocast
  (the CUDA default when the GPU supports bf16).
* ``fp16-mixed`` -- float32 weights, fp16 autocast with dynamic loss scaling (GPUs without bf16):
  the trainer scales each loss by a ``torch.amp.GradScaler`` before backward, skips an update
  whose gradients overflowed and halves the scale (reported as ``grad_scale`` and
  ``skipped_steps``; the scaler's state is saved in checkpoints). Works on the CPU too.
* ``bf16`` -- bfloat16 weights, no autocast (halves memory; less exact updates).
* ``auto`` -- the default described above.
"""

from __future__ import annotations

import contextlib
import functools
import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from tinker_core.errors import OpenTinkerError

PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16-mixed", "fp16-mixed", "bf16")
DEVICE_ENV = "OPENTINKER_DEVICE"
PRECISION_ENV = "OPENTINKER_PRECISION"


@dataclass(frozen=True)
class DeviceSpec:
    """A device, the dtype of the weights and the autocast dtype (None: no autocast)."""

    device: torch.device
    param_dtype: torch.dtype
    autocast_dtype: torch.dtype | None
    precision: str
    autocast: Callable[[], contextlib.AbstractContextManager[Any]] = field(init=False, repr=False, compare=False)
    """``autocast()``: a context in which forward passes run in ``autocast_dtype`` (a no-op without
    one); which context is chosen once, here, not on every forward pass."""

    def __post_init__(self) -> None:
        chosen: Callable[[], contextlib.AbstractContextManager[Any]] = (
            contextlib.nullcontext if self.autocast_dtype is None
            else functools.partial(torch.autocast, device_type=self.device.type, dtype=self.autocast_dtype)
        )
        object.__setattr__(self, "autocast", chosen)

    @property
    def needs_grad_scaler(self) -> bool:
        """fp16 autocast: gradients can underflow, so the trainer scales the loss (``GradScaler``)."""
        return self.autocast_dtype == torch.float16

    def to_dict(self) -> dict[str, str | None]:
        return {
            "device": str(self.device),
            "param_dtype": str(self.param_dtype).removeprefix("torch."),
            "autocast_dtype": None
            if self.autocast_dtype is None
            else str(self.autocast_dtype).removeprefix("torch."),
            "precision": self.precision,
        }


def _cuda_bf16() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_bf16_supported()


class DeviceError(OpenTinkerError, ValueError):
    """A device or precision this machine cannot give; ``field`` is ``"device"`` or ``"precision"``.

    ``str()`` is ``"<field>: <reason>"``; :meth:`in_config` names the config field instead.
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")

    def in_config(self) -> DeviceError:
        """The same error naming the job config's field (``model.device`` or ``model.dtype``)."""
        return DeviceError("model.device" if self.field == "device" else "model.dtype", self.reason)


def available_devices() -> list[str]:
    """The devices this machine has: ``cpu`` and ``cuda:0`` ... ``cuda:N-1``."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return ["cpu", *(f"cuda:{i}" for i in range(count))]


def resolve_device(device: str | torch.device | None = None, precision: str | None = None) -> DeviceSpec:
    """Choose the device and precision; arguments win over environment variables over defaults.

    Args:
        device: ``"cpu"``, ``"cuda"``, ``"cuda:0"``, ``"auto"`` or None (env ``OPENTINKER_DEVICE``,
            else CUDA when available, else CPU).
        precision: one of :data:`PRECISIONS` or None (env ``OPENTINKER_PRECISION``, else ``auto``).

    Raises:
        DeviceError: a device that is not a torch device or not on this machine (the message
            lists the available ones), or an unknown precision.
    """
    dev_raw = device if device is not None else os.environ.get(DEVICE_ENV) or "auto"
    if isinstance(dev_raw, str) and dev_raw.strip().lower() == "auto":
        dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        try:
            dev = torch.device(dev_raw)
        except (RuntimeError, TypeError) as e:
            raise DeviceError(
                "device", f"{str(dev_raw)!r} is not a torch device; use 'auto', 'cpu', 'cuda' or 'cuda:N'"
            ) from e
    if dev.type == "cuda":
        available = available_devices()
        if len(available) == 1:
            raise DeviceError(
                "device", f"{str(dev)!r} was asked for but CUDA is not available here; available: cpu (or use 'auto')"
            )
        if dev.index is not None and f"cuda:{dev.index}" not in available:
            raise DeviceError(
                "device", f"{str(dev)!r} does not exist on this machine; available: {', '.join(available)}"
            )
    prec = (precision if precision is not None else os.environ.get(PRECISION_ENV) or "auto").strip().lower()
    if prec not in PRECISIONS:
        raise DeviceError(
            "precision", f"{prec!r} is unknown; choose one of {', '.join(PRECISIONS)} (or env {PRECISION_ENV})"
        )
    if prec == "auto":
        prec = "bf16-mixed" if dev.type == "cuda" and _cuda_bf16() else "fp32"
    if prec == "fp32":
        return DeviceSpec(dev, torch.float32, None, prec)
    if prec == "bf16-mixed":
        return DeviceSpec(dev, torch.float32, torch.bfloat16, prec)
    if prec == "fp16-mixed":
        return DeviceSpec(dev, torch.float32, torch.float16, prec)
    return DeviceSpec(dev, torch.bfloat16, None, prec)  # "bf16"


def seed_everything(seed: int) -> None:
    """Seed python's ``random``, numpy's global generator and torch (CPU and every CUDA device)."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
