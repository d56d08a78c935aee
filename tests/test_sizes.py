"""Image sizes from the engine's layer history, and the CPU-vs-CUDA split (pure; no Docker)."""

from __future__ import annotations

from builder.engine import sizes
from builder.engine.port import Layer

CLASSIC = [
    {"CreatedBy": '/bin/sh -c #(nop)  CMD ["hello-gpu"]', "Size": 0},
    {"CreatedBy": "|0 /bin/sh -c chmod 0755 /usr/local/bin/hello-gpu", "Size": 35_700},
    {"CreatedBy": "/bin/sh -c #(nop) COPY file:d164 in /usr/local/bin/hello-gpu ", "Size": 35_700},
    {"CreatedBy": "/bin/sh -c #(nop) COPY dir:89ec3b5c in /opt/venv ", "Size": 262_600_000},
    {"CreatedBy": "|0 /bin/sh -c useradd --create-home --uid 10001 app", "Size": 8_890},
    {"CreatedBy": "", "Size": 169_200_000},
]
SINGLE_STAGE = [  # templates/Dockerfile.j2: the venv is written by the install step, nothing copies it
    {"CreatedBy": '/bin/sh -c #(nop)  CMD ["hello-gpu"]', "Size": 0},
    {"CreatedBy": "|0 /bin/sh -c chmod 0755 /usr/local/bin/hello-gpu", "Size": 35_700},
    {
        "CreatedBy": "|3 PIP_EXTRA_INDEX_URL= BUILDER_PIP_CONF_URL=http://127.0.0.1:1/t BUILDER_CA_URL= /bin/sh -c set -eu;"
        "     python3.11 -m venv /opt/venv;     /opt/venv/bin/python -m pip install -r /tmp/builder/requirements.lock;",
        "Size": 262_600_000,
    },
    {"CreatedBy": "/bin/sh -c #(nop) COPY file:3a1b in /tmp/builder/ ", "Size": 4_100},
    {"CreatedBy": "|0 /bin/sh -c useradd --create-home --uid 10001 app", "Size": 8_890},
    {"CreatedBy": "", "Size": 169_200_000},
]
BUILDKIT = [
    {"CreatedBy": "COPY /opt/venv /opt/venv # buildkit", "Size": 1_000},
    {"CreatedBy": "RUN /bin/sh -c python -m venv /opt/venv/sub # buildkit", "Size": 5},  # not the copy
]


def test_the_venv_is_the_layer_that_wrote_it() -> None:
    assert sizes.venv_bytes(layers(SINGLE_STAGE)) == 262_600_000  # the install step, not the requirements' COPY
    assert sizes.venv_bytes(layers(CLASSIC)) == 262_600_000  # an image older versions built: the final COPY
    assert sizes.venv_bytes(layers(BUILDKIT)) == 1_000
    assert sizes.venv_bytes([Layer("COPY dir:1 in /opt/venvs", 9)]) == 0
    canonical = "/bin/sh -c #(nop) ADD file:0f3e2a9c1b in / "  # the classic builder's history of `ADD venv.tar /`
    assert (
        sizes.venv_bytes([Layer(canonical, 250_000_000), Layer("/bin/sh -c #(nop) COPY file:1 in /usr/local/bin/hello-gpu ", 9)])
        == 250_000_000
    )
    assert sizes.venv_bytes([Layer("ADD venv.tar / # buildkit", 7)]) == 7
    # a canonical image normalized by builder: each host-made tar's history entry is its own step (engine/reproducible.py)
    assert sizes.venv_bytes([Layer("ADD nvidia.tar /", 400), Layer("/bin/sh -c useradd app", 9), Layer("ADD venv.tar /", 300)]) == 700


def layers(history: list[dict[str, object]]) -> list[Layer]:
    """The engine's history entries as the port's records (what the docker adapter makes of them)."""
    return [Layer(str(entry["CreatedBy"]), int(str(entry["Size"]))) for entry in history]


def test_ratio_is_image_over_venv_plus_base() -> None:
    found = sizes.Sizes(image=431_800_000, venv=262_600_000, base=169_200_000)
    assert found.ratio == 1.0
    assert found.to_json() == {"image_mb": 431.8, "venv_mb": 262.6, "base_mb": 169.2, "ratio": 1.0}
    assert sizes.Sizes(image=2_100, venv=1_000, base=1_000).ratio == 1.05
    assert sizes.Sizes(image=10, venv=0, base=0).ratio == 0.0


def test_cuda_difference_is_split_by_distribution() -> None:
    cpu = {"torch": 700, "numpy": 50, "sympy": 40}
    gpu = {"torch": 1_500, "numpy": 50, "sympy": 40, "nvidia-cudnn-cu13": 800, "nvidia-cublas": 500, "cuda-bindings": 30, "triton": 400}
    assert sizes.explain_difference(cpu, gpu, "torch") == {"cuda_wheels": 1_330, "framework": 800, "other": 400}
    tf = sizes.explain_difference({"tensorflow-cpu": 1_270}, {"tensorflow": 1_870, "nvidia-cudnn-cu12": 900}, "tensorflow")
    assert tf == {"cuda_wheels": 900, "framework": 600, "other": 0}
    assert sizes.CUDA_DISTRIBUTION.search("jax-cuda13-plugin") and sizes.CUDA_DISTRIBUTION.search("cupy-cuda13x")
    assert not sizes.CUDA_DISTRIBUTION.search("numba")


def test_each_layer_is_sized_from_the_history_that_wrote_bytes() -> None:
    history = [Layer("CMD", 0), Layer("ADD venv.tar", 300), Layer("RUN useradd", 9), Layer("ADD nvidia.tar", 500), Layer("", 169)]
    ids = ["sha256:base", "sha256:nvidia", "sha256:user", sizes.EMPTY_LAYER, "sha256:venv"]  # a step that wrote nothing
    assert sizes.sized_layers(ids, history) == (("sha256:base", 169), ("sha256:nvidia", 500), ("sha256:user", 9), ("sha256:venv", 300))
    assert sizes.sized_layers(ids[:3], history) is None, "a history that does not pair with the layers says nothing"


def test_a_line_shares_the_layers_two_images_hold() -> None:
    base = ("sha256:base", 169)
    torch = sizes.Layers((base, ("sha256:nvidia-a", 500), ("sha256:u1", 9), ("sha256:torch", 300)), 1)
    numba = sizes.Layers((base, ("sha256:nvidia-a", 500), ("sha256:u2", 9), ("sha256:numba", 100)), 1)
    jax = sizes.Layers((base, ("sha256:nvidia-b", 700), ("sha256:u3", 9), ("sha256:jax", 200)), 1)
    shares = sizes.line_shares({"torch": torch, "numba": numba, "jax": jax})
    assert shares == {"torch": (500, 309), "numba": (500, 109), "jax": (0, 909)}  # the base is neither: every image has it
    assert sizes.line_shares({"alone": torch}) == {"alone": (0, 809)}
