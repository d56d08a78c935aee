"""Smoke-test container arguments: GPU access by vendor and the locked-down run kwargs.

Pure: hand-built ImageSpec and HostInfo records, no engine, no GPU. The arguments checked are the
docker SDK's, as the adapter (engine/client.py `create_kwargs`) makes them of the ContainerSpec;
the SDK is only used to check that they are ones `containers.create` accepts (it converts them offline).
"""

from __future__ import annotations

from typing import Any

import pytest
from docker.models.containers import _create_container_args  # type: ignore[attr-defined]  # private: the stubs leave it out
from docker.types import DeviceRequest

from builder.engine.client import create_kwargs
from builder.host.facts import AmdInfo, DeviceNode, EngineFacts, HostInfo, NvidiaGpu, NvidiaInfo
from builder.model.plan import Accelerator, Base, ImageSpec, Install
from builder.smoke import args as smoke
from builder.smoke.args import GpuAccess, GpuDevices, gpu_access, gpu_devices, run_spec

REGISTRY = "ghcr.io/example/gpu-images"
TIMEOUT_S = 300
ENGINE = EngineFacts(reachable=True, version="27.1.1", runtimes=("nvidia", "runc"))


# -- records ---------------------------------------------------------------------------------
def _spec(image_id: str, base: Base, accelerator: Accelerator, requirement: str, variant: str, index: str) -> ImageSpec:
    install = Install("torch", "2.5.1", (requirement,), index_urls=(index,), variant=variant)
    return ImageSpec(
        id=image_id,
        tag=f"{REGISTRY}:{image_id}",
        base=base,
        stack="torch",
        python="3.11",
        frameworks=(("torch", "2.5.1"),),
        installs=(install,),
        packages=(requirement,),
        index_urls=(index,),
        accelerator=accelerator,
        content_hash="sha256:" + "0" * 64,
    )


CUDA = _spec(
    "torch2.5.1-cu124-py3.11-ubuntu22.04",
    Base("cuda12.4-ubuntu22.04", "cuda", "ubuntu22.04", "12.4.1", "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04"),
    Accelerator("cuda", "12.4.1", min_driver="550.54.15", mvc_driver="525.60.13", require_cuda="cuda>=12.4"),
    "torch==2.5.1+cu124",
    "cu124",
    "https://download.pytorch.org/whl/cu124",
)
ROCM = _spec(
    "torch2.5.1-rocm6.2-py3.11-ubuntu22.04",
    Base("rocm6.2-ubuntu22.04", "rocm", "ubuntu22.04", "6.2", "rocm/dev-ubuntu-22.04:6.2"),
    Accelerator("rocm", "6.2"),
    "torch==2.5.1+rocm6.2",
    "rocm6.2",
    "https://download.pytorch.org/whl/rocm6.2",
)
CPU = _spec(
    "torch2.5.1-cpu-py3.11-debian12",
    Base("local-debian12", "cpu", "debian12", bootstrap="debootstrap"),
    Accelerator("cpu", None),
    "torch==2.5.1+cpu",
    "cpu",
    "https://download.pytorch.org/whl/cpu",
)
SPECS = {"cuda": CUDA, "rocm": ROCM, "cpu": CPU}

NO_GPU_HOST = HostInfo(engine=ENGINE, nvidia=NvidiaInfo(status="absent"), amd=AmdInfo())
NVIDIA_HOST = HostInfo(
    engine=ENGINE,
    nvidia=NvidiaInfo(status="ok", driver="580.159.03", gpus=(NvidiaGpu(0, "NVIDIA H200", "9.0", 143771),), device_nodes=True),
    amd=AmdInfo(),
)
KFD = DeviceNode("/dev/kfd", gid=109, group="render", user_in_group=True)
RENDER_NODES = (
    DeviceNode("/dev/dri/renderD128", gid=44, group="video", user_in_group=True),
    DeviceNode("/dev/dri/renderD129", gid=109, group="render", user_in_group=True),
)
AMD_HOST = HostInfo(engine=ENGINE, nvidia=NvidiaInfo(status="absent"), amd=AmdInfo(kfd=KFD, render_nodes=RENDER_NODES))
HOSTS = {"none": NO_GPU_HOST, "nvidia": NVIDIA_HOST, "amd": AMD_HOST}

ROCM_DEVICES = ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]


def _kwargs(spec: ImageSpec, host: HostInfo, mode: str = "auto", env: dict[str, str] | None = None) -> dict[str, Any]:
    return create_kwargs(run_spec(spec, gpu_access(spec, mode, host), host, TIMEOUT_S, env))


def _assert_gpu_request(requests: list[Any]) -> None:
    assert len(requests) == 1
    request = requests[0]
    assert isinstance(request, DeviceRequest)
    assert request.count == -1
    assert request.capabilities == [["gpu"]]
    assert request.driver == ""
    assert request.device_ids == []
    assert request.options == {}
    assert request == DeviceRequest(count=-1, capabilities=[["gpu"]])


# -- host records ----------------------------------------------------------------------------
def test_host_records_say_what_is_present() -> None:
    assert NVIDIA_HOST.nvidia.has_gpu is True
    assert NVIDIA_HOST.amd.present is False
    assert AMD_HOST.amd.present is True
    assert AMD_HOST.nvidia.has_gpu is False
    assert NO_GPU_HOST.nvidia.has_gpu is False
    assert NO_GPU_HOST.amd.present is False
    assert KFD.group_label == "render"
    assert DeviceNode("/dev/dri/renderD130", gid=993, group=None, user_in_group=False).group_label == "993"


@pytest.mark.parametrize(
    "info",
    [
        NvidiaInfo(status="ok", driver="580.159.03", gpus=()),
        NvidiaInfo(status="no_devices", error="No devices were found"),
        NvidiaInfo(status="failed", error="NVIDIA-SMI has failed", device_nodes=True),
        NvidiaInfo(status="absent"),
    ],
)
def test_nvidia_has_gpu_only_when_ok_with_a_gpu(info: NvidiaInfo) -> None:
    assert info.has_gpu is False


# -- gpu_access -----------------------------------------------------------------------------
def test_gpu_modes() -> None:
    """Every `--gpu` option offers exactly the modes gpu_access tells apart, and each means something else."""
    import click

    from builder.cli import main

    def commands(group: click.Group) -> list[click.Command]:
        out: list[click.Command] = []
        for command in group.commands.values():
            out += commands(command) if isinstance(command, click.Group) else [command]
        return out

    offered = [p.type for c in commands(main) for p in c.params if "--gpu" in getattr(p, "opts", ())]
    assert offered, "no command takes --gpu"
    assert all(isinstance(t, click.Choice) and tuple(t.choices) == smoke.GPU_MODES for t in offered), offered
    answers = {mode: gpu_access(CUDA, mode, NO_GPU_HOST) for mode in smoke.GPU_MODES}
    assert len(set(answers.values())) == len(smoke.GPU_MODES), answers


# (vendor, host, mode) -> attach; a failure only for `require` on a host without that vendor's GPU.
ACCESS_TABLE = [
    ("cuda", "nvidia", "auto", True),
    ("cuda", "nvidia", "require", True),
    ("cuda", "nvidia", "off", False),
    ("cuda", "amd", "auto", False),
    ("cuda", "none", "auto", False),
    ("cuda", "none", "off", False),
    ("rocm", "amd", "auto", True),
    ("rocm", "amd", "require", True),
    ("rocm", "amd", "off", False),
    ("rocm", "nvidia", "auto", False),
    ("rocm", "none", "auto", False),
    ("rocm", "none", "off", False),
    *[("cpu", h, m, False) for h in HOSTS for m in smoke.GPU_MODES],
]


@pytest.mark.parametrize(("vendor", "host", "mode", "attach"), ACCESS_TABLE)
def test_gpu_access_attaches_only_for_the_vendors_gpu(vendor: str, host: str, mode: str, attach: bool) -> None:
    access = gpu_access(SPECS[vendor], mode, HOSTS[host])
    assert access.attach is attach
    assert access.failure is None
    assert access.reason


@pytest.mark.parametrize(
    ("vendor", "host", "what"),
    [
        ("cuda", "none", "no NVIDIA GPU on this host (nvidia-smi found none)"),
        ("cuda", "amd", "no NVIDIA GPU on this host (nvidia-smi found none)"),
        ("rocm", "none", "no AMD GPU on this host (no /dev/kfd)"),
        ("rocm", "nvidia", "no AMD GPU on this host (no /dev/kfd)"),
    ],
)
def test_gpu_require_without_the_gpu_is_a_failure(vendor: str, host: str, what: str) -> None:
    access = gpu_access(SPECS[vendor], "require", HOSTS[host])
    assert access == GpuAccess(attach=False, reason=what, failure=f"--gpu require: {what}")


@pytest.mark.parametrize("status", ["no_devices", "failed"])
def test_gpu_require_with_a_broken_or_empty_nvidia_driver_fails(status: str) -> None:
    host = HostInfo(engine=ENGINE, nvidia=NvidiaInfo(status=status, device_nodes=True), amd=AmdInfo())  # type: ignore[arg-type]
    access = gpu_access(CUDA, "require", host)
    assert access.attach is False
    assert access.failure == "--gpu require: no NVIDIA GPU on this host (nvidia-smi found none)"


def test_gpu_auto_without_the_gpu_says_checks_are_skipped() -> None:
    assert gpu_access(CUDA, "auto", NO_GPU_HOST) == GpuAccess(
        False, "no NVIDIA GPU on this host (nvidia-smi found none): GPU checks are skipped"
    )
    assert gpu_access(ROCM, "auto", NO_GPU_HOST) == GpuAccess(False, "no AMD GPU on this host (no /dev/kfd): GPU checks are skipped")


def test_gpu_off_and_cpu_reasons() -> None:
    assert gpu_access(CUDA, "off", NVIDIA_HOST) == GpuAccess(False, "--gpu off: GPU checks are skipped")
    assert gpu_access(ROCM, "off", AMD_HOST) == GpuAccess(False, "--gpu off: GPU checks are skipped")
    for mode in smoke.GPU_MODES:
        assert gpu_access(CPU, mode, NVIDIA_HOST) == GpuAccess(False, "cpu image: no GPU needed")
    assert gpu_access(CUDA, "auto", NVIDIA_HOST) == GpuAccess(True, "cuda GPU found on this host")
    assert gpu_access(ROCM, "auto", AMD_HOST) == GpuAccess(True, "rocm GPU found on this host")


# -- run kwargs: GPU part ---------------------------------------------------------------------
def test_cuda_with_gpu_requests_all_gpus_and_no_devices() -> None:
    kwargs = _kwargs(CUDA, NVIDIA_HOST)
    _assert_gpu_request(kwargs["device_requests"])
    assert "devices" not in kwargs
    assert "group_add" not in kwargs


def test_rocm_with_gpu_maps_kfd_and_dri_with_the_node_groups() -> None:
    kwargs = _kwargs(ROCM, AMD_HOST)
    assert kwargs["devices"] == ROCM_DEVICES
    # gids of /dev/kfd and every render node, as strings, each once.
    assert sorted(kwargs["group_add"], key=int) == ["44", "109"]
    assert len(kwargs["group_add"]) == 2
    assert all(isinstance(g, str) for g in kwargs["group_add"])
    assert "device_requests" not in kwargs


def test_rocm_group_add_follows_the_hosts_gids() -> None:
    amd = AmdInfo(kfd=DeviceNode("/dev/kfd", 993, None, False), render_nodes=(DeviceNode("/dev/dri/renderD128", 992, None, False),))
    host = HostInfo(engine=ENGINE, nvidia=NvidiaInfo(status="absent"), amd=amd)
    kwargs = _kwargs(ROCM, host)
    assert sorted(kwargs["group_add"], key=int) == ["992", "993"]
    assert kwargs["devices"] == ROCM_DEVICES


def test_rocm_kfd_without_render_nodes_still_adds_the_kfd_group() -> None:
    host = HostInfo(engine=ENGINE, nvidia=NvidiaInfo(status="absent"), amd=AmdInfo(kfd=KFD))
    kwargs = _kwargs(ROCM, host)
    assert kwargs["devices"] == ROCM_DEVICES
    assert kwargs["group_add"] == ["109"]


@pytest.mark.parametrize(
    ("vendor", "host", "mode"),
    [
        ("cuda", "none", "auto"),
        ("cuda", "amd", "auto"),
        ("cuda", "nvidia", "off"),
        ("rocm", "none", "auto"),
        ("rocm", "nvidia", "auto"),
        ("rocm", "amd", "off"),
        ("cpu", "none", "auto"),
        ("cpu", "nvidia", "auto"),
        ("cpu", "amd", "require"),
    ],
)
def test_no_gpu_arguments_when_not_attached(vendor: str, host: str, mode: str) -> None:
    kwargs = _kwargs(SPECS[vendor], HOSTS[host], mode)
    assert not {"device_requests", "devices", "group_add", "runtime", "privileged"} & set(kwargs)


def test_gpu_kwargs_empty_without_access() -> None:
    assert gpu_devices(CUDA, GpuAccess(False, "x"), NVIDIA_HOST) == GpuDevices()
    assert gpu_devices(ROCM, GpuAccess(False, "x"), AMD_HOST) == GpuDevices()
    assert create_kwargs(run_spec(CUDA, GpuAccess(False, "x"), NVIDIA_HOST, TIMEOUT_S)).keys().isdisjoint({"device_requests", "devices"})


# -- run kwargs: lock-down, for every image and host ------------------------------------------
@pytest.mark.parametrize("host", sorted(HOSTS))
@pytest.mark.parametrize("vendor", sorted(SPECS))
def test_run_kwargs_are_locked_down(vendor: str, host: str) -> None:
    spec = SPECS[vendor]
    kwargs = _kwargs(spec, HOSTS[host])
    assert kwargs["image"] == spec.tag
    assert kwargs["network_disabled"] is True
    assert kwargs["cap_drop"] == ["ALL"]
    assert kwargs["security_opt"] == ["no-new-privileges"]
    assert kwargs["read_only"] is True
    assert "/tmp" in kwargs["tmpfs"]
    assert kwargs["tmpfs"] == {"/tmp": "rw,nosuid,nodev,size=2g"}
    assert kwargs["mem_limit"] == "8g"
    assert kwargs["pids_limit"] == 1024
    assert kwargs["detach"] is True
    assert kwargs["labels"] == {"io.builder.image-id": spec.id}
    assert kwargs["environment"] == {"HOME": "/tmp", "XDG_CACHE_HOME": "/tmp/.cache"}
    # The container only sleeps, bounded by the timeout plus a margin, so it ends by itself.
    assert kwargs["command"] == ["sleep", str(TIMEOUT_S + 60)]
    assert int(kwargs["command"][1]) > TIMEOUT_S
    assert not {"privileged", "network_mode", "cap_add", "volumes", "ports", "network"} & set(kwargs)


@pytest.mark.parametrize("timeout_s", [1, 60, 900])
def test_sleep_is_bounded_by_the_timeout(timeout_s: int) -> None:
    kwargs = create_kwargs(run_spec(CPU, gpu_access(CPU, "auto", NO_GPU_HOST), NO_GPU_HOST, timeout_s))
    assert kwargs["command"] == ["sleep", str(timeout_s + 60)]


def test_environment_is_merged_and_may_override() -> None:
    kwargs = _kwargs(CPU, NO_GPU_HOST, env={"FOO": "1", "HOME": "/tmp/home"})
    assert kwargs["environment"] == {"HOME": "/tmp/home", "XDG_CACHE_HOME": "/tmp/.cache", "FOO": "1"}


def test_tmpfs_is_a_copy_not_the_module_constant() -> None:
    kwargs = _kwargs(CPU, NO_GPU_HOST)
    kwargs["tmpfs"]["/var/tmp"] = "rw"
    assert smoke.TMPFS == {"/tmp": "rw,nosuid,nodev,size=2g"}


@pytest.mark.parametrize(("vendor", "host"), [("cuda", "nvidia"), ("rocm", "amd"), ("cpu", "none")])
def test_docker_sdk_accepts_the_kwargs(vendor: str, host: str) -> None:
    """The SDK's own offline conversion (what `containers.create` does before the API call)."""
    kwargs = _kwargs(SPECS[vendor], HOSTS[host])
    created = _create_container_args({**kwargs, "version": "1.45"})
    config = created["host_config"]
    assert created["image"] == SPECS[vendor].tag
    assert created["network_disabled"] is True
    assert config["CapDrop"] == ["ALL"]
    assert config["SecurityOpt"] == ["no-new-privileges"]
    assert config["ReadonlyRootfs"] is True
    assert config["Tmpfs"] == {"/tmp": "rw,nosuid,nodev,size=2g"}
    assert config["Memory"] == 8 * 1024**3
    assert config["PidsLimit"] == 1024
    if vendor == "cuda":
        assert config["DeviceRequests"] == [{"Driver": "", "Count": -1, "DeviceIDs": [], "Capabilities": [["gpu"]], "Options": {}}]
        assert "Devices" not in config
    elif vendor == "rocm":
        assert config["Devices"] == [
            {"PathOnHost": "/dev/kfd", "PathInContainer": "/dev/kfd", "CgroupPermissions": "rwm"},
            {"PathOnHost": "/dev/dri", "PathInContainer": "/dev/dri", "CgroupPermissions": "rwm"},
        ]
        assert sorted(config["GroupAdd"], key=int) == ["44", "109"]
        assert "DeviceRequests" not in config
    else:
        assert "Devices" not in config
        assert "DeviceRequests" not in config
