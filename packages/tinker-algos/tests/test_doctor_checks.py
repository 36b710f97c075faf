"""tinker-algos' checks for ``opentinker doctor`` (torch, its device and dtypes; the model cache)
name the fix of each problem. Failures are simulated by replacing what the checks read."""

from __future__ import annotations

import sys

import pytest
import torch

from tinker_algos.commands import doctor_checks
from tinker_algos.model.device import DeviceSpec
from tinker_core.registry import get_registry, reset_plugins


def problems(findings) -> list[str]:
    return [f.line() for f in findings if f.problem]


def test_the_checks_are_registered_through_the_hook(monkeypatch):
    monkeypatch.setenv("OPENTINKER_LOAD_PLUGINS", "tinker-algos")
    reset_plugins()
    try:
        entries = {e.name: e for e in get_registry("doctor_checks").entries()}
        assert set(entries) == {"torch", "model-cache"} and entries["torch"].distribution == "tinker-algos"
        assert any(f.check == "device" for f in entries["torch"].obj())
    finally:
        reset_plugins()


def test_this_machine_trains_in_float32_on_its_device(monkeypatch):
    monkeypatch.delenv("OPENTINKER_DEVICE", raising=False)
    monkeypatch.delenv("OPENTINKER_PRECISION", raising=False)
    found = list(doctor_checks.check_torch())
    assert found[0].check == "torch" and found[0].detail.startswith(torch.__version__)
    device = next(f for f in found if f.check == "device")
    assert "float32" in device.detail.split("dtypes there:")[1]


def test_a_torch_that_cannot_be_imported_names_the_reinstall(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    (line,) = problems(doctor_checks.check_torch())
    assert line.startswith("error: torch: cannot be imported (ModuleNotFoundError")
    assert line.endswith("fix: pip install --force-reinstall 'torch>=2.6' (in a uv checkout: uv sync --locked)")


def test_a_gpu_torch_cannot_use_names_the_cuda_build(monkeypatch):
    monkeypatch.setattr(doctor_checks, "nvidia_gpu_present", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    lines = problems(doctor_checks.check_torch())
    assert len(lines) == 1 and lines[0].startswith("warning: torch: this machine has an NVIDIA GPU but torch cannot use it")
    assert "fix: install torch's CUDA build: pip install --force-reinstall torch" in lines[0]


def test_a_device_this_machine_lacks_names_the_variable(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("OPENTINKER_DEVICE", "cuda")
    (line,) = problems(doctor_checks.check_torch())
    assert line.startswith("error: device: 'cuda' was asked for but CUDA is not available here")
    assert line.endswith("fix: unset OPENTINKER_DEVICE and OPENTINKER_PRECISION (or set them to what this machine has)")


def test_a_gpu_without_bfloat16_names_fp16_mixed(monkeypatch):
    import tinker_algos.model.device

    cuda = DeviceSpec(torch.device("cuda", 0), torch.float32, None, "fp32")
    monkeypatch.setattr(tinker_algos.model.device, "resolve_device", lambda: cuda)
    monkeypatch.setattr(doctor_checks, "_working_dtypes", lambda torch_, device: (["float32", "float16"], ["bfloat16"]))
    (line,) = problems(doctor_checks.check_torch())
    assert line == ("warning: device: cuda:0 has no bfloat16: the auto precision trains in fp32; fix: set model.dtype: "
                    "float16 in the job config (or OPENTINKER_PRECISION=fp16-mixed) to halve activation memory")


def test_a_device_where_float32_fails_is_an_error(monkeypatch):
    monkeypatch.setattr(doctor_checks, "_working_dtypes", lambda torch_, device: ([], ["float32", "bfloat16", "float16"]))
    (line,) = problems(doctor_checks.check_torch())
    assert line.startswith("error: device: float32 arithmetic fails on cpu; fix: set OPENTINKER_DEVICE=cpu, or reinstall torch")


def test_the_model_cache_lists_its_models_and_room(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENTINKER_CACHE", str(tmp_path / "cache"))
    (tmp_path / "cache" / "models" / "tiny-1").mkdir(parents=True)
    (finding,) = doctor_checks.check_model_cache()
    assert finding.severity == "ok" and f"{tmp_path / 'cache'}: 1 model(s) (tiny-1)" in finding.detail


def test_an_unwritable_model_cache_names_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENTINKER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(doctor_checks.os, "access", lambda path, mode: False)
    assert problems(doctor_checks.check_model_cache()) == [
        f"error: model-cache: {tmp_path / 'cache'} is not writable; fix: set OPENTINKER_CACHE to a writable "
        "directory (or fix its permissions)"]


def test_a_full_disk_under_the_cache_is_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENTINKER_CACHE", str(tmp_path))
    monkeypatch.setattr(doctor_checks, "free_bytes", lambda path: 512 * 1024**2)
    (line,) = problems(doctor_checks.check_model_cache())
    assert line == (f"warning: model-cache: only 0.5 GiB free under {tmp_path}: a model fetch or import may not fit; "
                    "fix: free some space, or set OPENTINKER_CACHE to a bigger disk")


@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16"])
def test_the_dtype_probe_is_a_real_computation(name):
    works, fails = doctor_checks._working_dtypes(torch, torch.device("cpu"))
    assert name in works + fails and "float32" in works
