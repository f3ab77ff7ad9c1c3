"""common.attention_kernels (seqkit/models/modules/kernels.py): the setting's parsing and errors, the
global SDPA flags it sets on CUDA and leaves alone on CPU, the padding mask that skips its
host-device sync on CUDA; and bf16 generation with the weights cast once (seqkit/generation/translator.py)."""

from types import SimpleNamespace

import pytest
import torch

import seqkit
from seqkit.cli.generate import main as generate_main
from seqkit.core.checkpoints import load_for_inference
from seqkit.core.errors import SeqkitError
from seqkit.generation import GenerationConfig
from seqkit.generation.translator import (Translator, cast_for_search, prepare_for_search, search_dtype,
                                          weights_dtype)
from seqkit.core.registry import MODELS
from seqkit.models.modules.kernels import parse_attention_kernels, padding_mask, use_attention_kernels
from tests.test_transformer import DICT, build, tiny

seqkit.import_builtin_components()
CUDA, CPU = torch.device("cuda"), torch.device("cpu")  # a device object only: nothing runs on it here
# the switch each kernel name reads back through (torch.backends.cuda.<name>())
ENABLED = {"flash": "flash_sdp_enabled", "efficient": "mem_efficient_sdp_enabled", "cudnn": "cudnn_sdp_enabled",
           "math": "math_sdp_enabled"}
SWITCH = {"flash": "enable_flash_sdp", "efficient": "enable_mem_efficient_sdp", "cudnn": "enable_cudnn_sdp",
          "math": "enable_math_sdp"}
VALID = "use auto, torch, or a comma list of flash, efficient, cudnn, math in priority order"


def sdp_state():
    """Torch's process-wide SDPA switches and priority order."""
    return {k: getattr(torch.backends.cuda, f)() for k, f in ENABLED.items()}, list(torch._C._get_sdp_priority_order())


@pytest.fixture
def restore_sdp():
    """The switches and order as they were before the test, whatever it set (CPU attention reads them too)."""
    enabled, order = sdp_state()
    yield enabled, order
    for k, on in enabled.items():
        getattr(torch.backends.cuda, SWITCH[k])(on)
    torch._C._set_sdp_priority_order(order)
    assert sdp_state() == (enabled, order)


# -- (a) the setting ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("setting, names", [
    ("auto", ("flash", "efficient", "math")), ("torch", None), ("efficient,math", ("efficient", "math")),
    (" cudnn , flash ", ("cudnn", "flash")), ("math", ("math",)),
])
def test_settings_parse_to_kernels_in_priority_order(setting, names):
    assert parse_attention_kernels(setting) == names


@pytest.mark.parametrize("setting, why", [
    ("fast", "'fast' is not a kernel"), ("flash,mem_efficient", "'mem_efficient' is not a kernel"),
    ("flash,", "an empty entry"), ("", "an empty entry"), ("auto,flash", "'auto' is not a kernel"),
    ("FLASH", "'FLASH' is not a kernel"),
])
def test_bad_settings_are_one_line_naming_the_valid_ones(setting, why):
    with pytest.raises(SeqkitError) as e:
        parse_attention_kernels(setting)
    assert str(e.value) == f"common.attention_kernels={setting!r}: {why}; {VALID}"


def test_a_kernel_named_twice_is_refused():
    with pytest.raises(SeqkitError) as e:
        parse_attention_kernels("flash,math,flash")
    assert str(e.value) == f"common.attention_kernels='flash,math,flash' names flash twice; {VALID}"


def test_a_bad_setting_is_refused_on_cpu_too(restore_sdp):
    with pytest.raises(SeqkitError, match="'cudnn2' is not a kernel"):
        use_attention_kernels("flash,cudnn2", CPU)
    assert sdp_state() == restore_sdp


# -- (b) the flags ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", ["auto", "cudnn,math", "torch"])
def test_cpu_devices_leave_every_flag_as_it_was(setting, restore_sdp):
    line = use_attention_kernels(setting, CPU)
    assert line == "attention kernels: torch's cpu kernels (common.attention_kernels applies to CUDA)"
    assert sdp_state() == restore_sdp


@pytest.mark.parametrize("setting, on, first, line", [
    ("auto", {"flash": True, "efficient": True, "cudnn": False, "math": True}, [1, 2, 0],
     "attention kernels: flash > efficient > math; cudnn off (common.attention_kernels=auto)"),
    ("cudnn,math", {"flash": False, "efficient": False, "cudnn": True, "math": True}, [3, 0],
     "attention kernels: cudnn > math; flash, efficient off (common.attention_kernels=cudnn,math)"),
    ("efficient,flash,cudnn,math", {"flash": True, "efficient": True, "cudnn": True, "math": True}, [2, 1, 3, 0],
     "attention kernels: efficient > flash > cudnn > math (common.attention_kernels=efficient,flash,cudnn,math)"),
])
def test_cuda_devices_get_exactly_the_listed_kernels_in_order(setting, on, first, line, restore_sdp):
    _, before = restore_sdp
    for device in (CUDA, SimpleNamespace(type="cuda")):  # only .type is read
        assert use_attention_kernels(setting, device) == line
        enabled, order = sdp_state()
        assert enabled == on
        # the listed first (SDPBackend values: math 0, flash 1, efficient 2, cudnn 3), the rest as they were
        assert order == first + [b for b in before if b not in first]


def test_torch_leaves_cuda_flags_as_they_are(restore_sdp):
    use_attention_kernels("math", CUDA)
    state = sdp_state()
    assert use_attention_kernels("torch", CUDA) == "attention kernels: torch's choice (common.attention_kernels=torch)"
    assert sdp_state() == state


# -- (d) the padding mask ------------------------------------------------------------------------------------------


def test_padding_mask_is_none_for_a_full_cpu_batch_and_a_mask_for_a_padded_one():
    assert padding_mask(torch.ones(3, 5, dtype=torch.bool)) is None
    keep = torch.tensor([[True, True, True], [True, True, False]])  # (B=2, S=3)
    mask = padding_mask(keep)
    assert mask.shape == (2, 1, 1, 3) and mask.dtype == torch.bool
    assert mask[:, 0, 0].tolist() == keep.tolist()


class _CudaKeep:
    """A ``keep`` claiming to live on CUDA whose ``all()`` (a host-device sync there) must not be called."""

    def __init__(self, keep):
        self.keep, self.device = keep, CUDA

    def all(self):
        raise AssertionError("padding_mask synchronized with the GPU")

    def __getitem__(self, index):
        return self.keep[index]


def test_padding_mask_on_cuda_is_always_the_mask_without_asking():
    mask = padding_mask(_CudaKeep(torch.ones(2, 4, dtype=torch.bool)))
    assert mask.shape == (2, 1, 1, 4) and bool(mask.all())


# -- (c) bf16 generation with the weights cast once ---------------------------------------------------------------


def test_cuda_low_precision_casts_once_where_it_can():
    model = build(tiny())
    assert search_dtype(model, "bf16", CUDA) == torch.bfloat16 and search_dtype(model, "fp16", CUDA) == torch.float16
    assert search_dtype(model, "fp32", CUDA) is None
    assert search_dtype(model, "bf16", CPU) is None  # the CPU's measured bf16 path: autocast
    lstm = MODELS.build(MODELS._presets["lstm_tiny"](), DICT, DICT)
    assert search_dtype(lstm, "bf16", CUDA) is None  # recurrent layers keep autocast


def test_translator_on_cuda_casts_the_weights_and_drops_autocast():
    model = build(tiny())
    task = SimpleNamespace(tgt_dict=DICT)
    t = Translator(task, model, GenerationConfig(beam=2), CUDA, "bf16")  # nothing runs on the device here
    assert weights_dtype(model) == torch.bfloat16 and t.autocast_dtype is None
    assert all(b.dtype == torch.bfloat16 for b in model.buffers() if b.is_floating_point())
    assert not cast_for_search(model, torch.bfloat16)  # once
    cpu = Translator(task, build(tiny()), GenerationConfig(beam=2), CPU, "bf16")
    assert weights_dtype(cpu.model) == torch.float32 and cpu.autocast_dtype == torch.bfloat16


@pytest.fixture(scope="module")
def checkpoint(toy_data, tiny_train_args, tmp_path_factory):
    from seqkit.cli.train import main as train

    _, data = toy_data
    root = tmp_path_factory.mktemp("kernels")
    train(tiny_train_args + [f"task.data={data}", f"checkpoint.save_dir={root}", "optimization.max_update=60",
                             "checkpoint.no_epoch_checkpoints=true"])
    return str(root / "checkpoint_best.pt")


def test_bf16_weights_cast_once_translate_as_autocast_does(checkpoint, toy_data):
    raw, _ = toy_data
    sentences = (raw / "test.de").read_text(encoding="utf-8").splitlines()
    gen = GenerationConfig(beam=2, max_len_b=40)
    autocast = Translator.load(checkpoint, gen, "cpu", "bf16")
    assert autocast.autocast_dtype == torch.bfloat16 and weights_dtype(autocast.model) == torch.float32
    task, model = load_for_inference(checkpoint)
    model = prepare_for_search(model, CPU, "bf16")  # the flat decoder step, built on the fp32 weights
    assert model.step_plan is not None and cast_for_search(model, torch.bfloat16)  # ... and built again
    cast = Translator(task, model, gen, CPU, "bf16")
    assert cast.autocast_dtype is None  # the weights are bf16 already
    a, b = autocast.translate(sentences), cast.translate(sentences)
    assert len(a) == len(b) == 40
    # measured 38 of 40 identical (AMD EPYC with AVX512-BF16 and AMX, torch 2.13), as many as autocast
    # against fp32 (38): with the weights cast, bf16 rounds the residual stream and the norms' outputs,
    # which autocast keeps in fp32; the two that differ are undertrained outputs that repeat a piece
    assert sum(x == y for x, y in zip(a, b)) >= 36


def test_generate_logs_the_kernel_line_and_refuses_a_bad_setting(checkpoint, toy_data, run_cli, fast_gen_args):
    _, data = toy_data
    gen = fast_gen_args + [f"task.data={data}", f"path={checkpoint}"]
    r = run_cli(generate_main, gen + ["common.attention_kernels=efficient\\,math"])
    assert r.code == 0, r.err
    assert "attention kernels: torch's cpu kernels (common.attention_kernels applies to CUDA)" in r.err
    r = run_cli(generate_main, gen + ["common.attention_kernels=flashy"])
    assert r.code == 1 and r.messages == [f"seqkit-generate: error: common.attention_kernels='flashy': "
                                          f"'flashy' is not a kernel; {VALID}"]
