"""``opentinker doctor``'s checks of what training needs: torch (its device and dtypes) and the
model cache. Registered through ``opentinker_register_doctor_checks`` (tinker_algos.plugin), so the
client, which has no torch, runs them only where tinker-algos is installed.

Each check yields :class:`tinker_core.doctor.Finding` lines; the machine facts they read are small
functions here (:func:`nvidia_gpu_present`, :func:`free_bytes`) that the tests replace.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from tinker_core.doctor import Finding

MIN_FREE_CACHE_BYTES = 2 * 1024**3
DTYPES = ("float32", "bfloat16", "float16")
REINSTALL_TORCH = "pip install --force-reinstall 'torch>=2.6' (in a uv checkout: uv sync --locked)"


def nvidia_gpu_present() -> bool:
    """Whether this machine has an NVIDIA GPU and driver, whatever torch sees."""
    return Path("/proc/driver/nvidia/gpus").is_dir() or shutil.which("nvidia-smi") is not None


def free_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def _working_dtypes(torch: object, device: object) -> tuple[list[str], list[str]]:
    works, fails = [], []
    for name in DTYPES:
        dtype = getattr(torch, name)
        try:
            a = torch.ones((4, 4), dtype=dtype, device=device)  # type: ignore[attr-defined]
            if float((a @ a).sum()) != 64.0:
                raise ArithmeticError("wrong result")
            works.append(name)
        except Exception:  # noqa: BLE001 - any failure means the dtype does not work there
            fails.append(name)
    return works, fails


def check_torch() -> Iterator[Finding]:
    """torch imports, the device a job would train on, and which dtypes work there."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001 - a broken install raises anything
        yield Finding("torch", f"cannot be imported ({type(e).__name__}: {e})", "error", fix=REINSTALL_TORCH)
        return
    from tinker_algos.model.device import (
        DEVICE_ENV,
        PRECISION_ENV,
        DeviceError,
        available_devices,
        resolve_device,
    )

    cuda = torch.version.cuda
    yield Finding("torch", f"{torch.__version__} ({'CUDA ' + cuda if cuda else 'CPU build'}); devices: "
                           f"{', '.join(available_devices())}")
    if not torch.cuda.is_available() and nvidia_gpu_present():
        yield Finding("torch", "this machine has an NVIDIA GPU but torch cannot use it "
                      f"({'a CPU build' if not cuda else 'CUDA ' + cuda + ' does not start: driver too old?'}); "
                      "jobs will train on the CPU", "warning",
                      fix="install torch's CUDA build: pip install --force-reinstall torch (PyPI's Linux wheel; "
                          "not the --index-url .../cpu one) and a driver for its CUDA")
    try:
        spec = resolve_device()
    except DeviceError as e:
        yield Finding("device", e.reason, "error",
                      fix=f"unset {DEVICE_ENV} and {PRECISION_ENV} (or set them to what this machine has)")
        return
    works, fails = _working_dtypes(torch, spec.device)
    dtypes = ", ".join(works) + (f"; not {', '.join(fails)}" if fails else "")
    yield Finding("device", f"jobs train on {spec.device} in {spec.precision}; dtypes there: {dtypes}")
    if "float32" in fails:
        yield Finding("device", f"float32 arithmetic fails on {spec.device}", "error",
                      fix=f"set {DEVICE_ENV}=cpu, or reinstall torch: {REINSTALL_TORCH}")
    elif spec.device.type == "cuda" and "bfloat16" in fails:
        yield Finding("device", f"{spec.device} has no bfloat16: the auto precision trains in fp32", "warning",
                      fix=f"set model.dtype: float16 in the job config (or {PRECISION_ENV}=fp16-mixed) "
                          "to halve activation memory")


def check_model_cache() -> Iterator[Finding]:
    """The model cache ($OPENTINKER_CACHE) is writable and has room; which models it holds."""
    from tinker_algos.hub.cache import CACHE_ENV, cache_root

    root = cache_root()
    existing = root
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK):
        yield Finding("model-cache", f"{root} is not writable", "error",
                      fix=f"set {CACHE_ENV} to a writable directory (or fix its permissions)")
        return
    free = free_bytes(existing)
    models = sorted(p.name for p in (root / "models").iterdir() if p.is_dir()) if (root / "models").is_dir() else []
    held = f"{len(models)} model(s)" + (f" ({', '.join(models[:4])}{', ...' if len(models) > 4 else ''})" if models else "")
    yield Finding("model-cache", f"{root}: {held}, {free / 1024**3:.1f} GiB free")
    if free < MIN_FREE_CACHE_BYTES:
        yield Finding("model-cache", f"only {free / 1024**3:.1f} GiB free under {root}: a model fetch or import may "
                      "not fit", "warning", fix=f"free some space, or set {CACHE_ENV} to a bigger disk")
