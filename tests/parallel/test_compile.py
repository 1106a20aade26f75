"""pretrain compile: the real train step compiled by libtpu for a TPU topology, on this CPU machine.

The compiled program's own figures are checked against what the code means them to say: the splash kernel is in
it (a Mosaic custom call), its FLOPs are the formula's, its collectives are counted once per loop iteration; a
step too large for its chips, an unknown topology and a mesh or setting the slice cannot run are refused in one
line. The compiling tests need libtpu (the `tpu` extra, which `make test` installs) and are skipped without it.
"""

import importlib.util
import json
import os

import pytest

from pretrain import cli
from pretrain.commands import compile as compile_lib, launch
from pretrain.parallel import gpu, tpu
from pretrain.train import compiled
from tests.conftest import REPO

needs_cuda_plugin = pytest.mark.skipif(not gpu.cuda_plugin_installed(),
                                       reason="JAX's CUDA plugin is not installed (pip install -e '.[gpu-compile]')")
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="libtpu is not installed (pip install -e '.[tpu]')")
SMALL = ["--config.model.num_layers=2", "--config.model.d_model=256", "--config.model.num_heads=4",
         "--config.model.num_kv_heads=4", "--config.model.head_dim=64", "--config.model.mlp_dim=1024",
         "--config.model.vocab_size=4096", "--config.train.batch_size=16"]
AXES = ["--config.mesh.data=2", "--config.mesh.fsdp=2", "--config.mesh.tensor=2"]
# One layer of 3.2e9 parameters, with Adam's two moments 38 GB in float32: 19 GB a chip over 2 FSDP shards of 16 GiB.
TOO_LARGE = ["--config.model.num_layers=1", "--config.model.d_model=8192", "--config.model.mlp_dim=131072",
             "--config.model.num_heads=8", "--config.model.num_kv_heads=8", "--config.model.head_dim=128",
             "--config.train.batch_size=4", "--config.data.seq_len=128", "--config.model.vocab_size=4096"]


def _exit_code(main, argv) -> int:
  try:
    return main(argv)
  except SystemExit as e:
    return e.code


def _config(*argv):
  return cli.parse_command_line(cli.parser_for("test", ""), list(argv))[1]


@pytest.fixture(scope="module")
def decoder():
  """A small decoder-only LM's step on a v5e-8 slice (2 x 4 chips) over data, FSDP and tensor axes, with its
  compiled program's text."""
  cfg = _config(*SMALL, *AXES, "--config.data.seq_len=256")
  return compile_lib.check(cfg, tpu.target("v5e-8"))


@pytest.mark.slow
@needs_libtpu
def test_a_decoder_compiles_for_the_slice_with_splash_and_fits(decoder):
  assert decoder["devices"] == 8 and decoder["mesh"] == {"data": 2, "stage": 1, "fsdp": 2, "expert": 1, "context": 1, "tensor": 2}
  assert decoder["attention"] == ["splash"] and decoder["dtype"] == "bfloat16"  # What a TPU run chooses.
  assert decoder["kernel_calls"] > 0  # The Mosaic kernel's custom call is in the compiled program.
  assert decoder["fits"] and 0 < decoder["total"] < decoder["hbm"] == 16 * 2**30
  params = decoder["memory"]["parameters"]  # Adam's two moments, float32 as the parameters, and its step count:
  assert params > 0 and decoder["memory"]["optimizer state"] == pytest.approx(2 * params, abs=64)


@pytest.mark.slow
@needs_libtpu
def test_the_compiler_s_flops_are_the_formula_s(decoder):
  assert decoder["kernel_attention_flops"] > 0
  assert 0.9 < decoder["flops_ratio"] < 1.1, decoder["flops_ratio"]


@pytest.mark.slow
@needs_libtpu
def test_the_sharded_step_gathers_parameters_and_reduces_gradients(decoder):
  moved = decoder["collectives"]
  assert moved["all-gather"]["count"] > 0 and moved["all-gather"]["bytes"] > 0  # FSDP's parameters.
  assert moved["all-reduce"]["bytes"] + moved["reduce-scatter"]["bytes"] > 0  # The gradients.
  bound = decoder["roofline"]
  assert bound["step_s"] == max(bound["compute_s"], bound["memory_s"], bound["collectives_s"]) > 0
  assert 0 < decoder["mfu_bound"] <= 1


@pytest.mark.slow
@needs_libtpu
def test_t5_compiles_for_the_slice_and_fits(capsys, tmp_path):
  code = compile_lib.main(["--topology=v5e:2x4", "--config=t5_1_1_small", *SMALL, *AXES, "--config.train.microbatches=1",
                           "--config.data.inputs_length=128", "--config.data.targets_length=32",
                           "--config.model.num_decoder_layers=2", f"--json={tmp_path}/out/t5.json"])  # Its folder made.
  out = capsys.readouterr().out
  facts = json.loads((tmp_path / "out" / "t5.json").read_text())
  assert code == 0 and facts["fits"] and "fits" in out and "roofline per step" in out
  assert facts["attention"] == ["xla"]  # T5's relative-position bias: no kernel can take it.
  assert facts["mesh"]["tensor"] == 2 and facts["compiler_flops"] > 0


@pytest.mark.slow
@needs_libtpu
def test_a_step_too_large_for_the_slice_is_refused_in_one_line(capsys, tmp_path):
  """XLA refuses to lay out its temporaries in the chip's memory (RESOURCE_EXHAUSTED): the step does not fit, exit
  1 as --help says (it was 2, with no --json), one line, and --json's verdict."""
  code = _exit_code(compile_lib.main, ["--topology=v5e-4", "--config.mesh.fsdp=2", "--config.mesh.data=2", *TOO_LARGE,
                                       f"--json={tmp_path}/facts.json"])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 1 and len(err) == 1 and err[0].startswith("error: ") and "does not fit" in err[0], err
  assert json.loads((tmp_path / "facts.json").read_text())["fits"] is False


@pytest.mark.parametrize("argv, message", [
    (["--topology=v9z-8"], "not a TPU slice or GPU pool this check knows"),
    (["--topology=v5p-12"], "v5p-N with N in"),
    (["--topology=v5e-2"], "or give the topology itself (v5e:AxB)"),  # Two dimensions, as v5e's and v6e's have.
    (["--topology=a100-8"], "or h100-N for N H100 GPUs"),
    (["--topology=v5e:2x2x2"], "has 2 dimensions"),
    (["--topology=v5e-4", "--slices=0"], "--slices"),
    (["--topology=h100-12"], "a multiple of 8"),
    (["--topology=h100-8", "--slices=2"], "GPUs are one pool"),
])
def test_an_unknown_topology_is_refused_in_one_line(capsys, argv, message):
  with pytest.raises(SystemExit) as e:
    compile_lib.main(argv)
  err = capsys.readouterr().err.strip().splitlines()
  assert e.value.code == 2 and len(err) == 1 and err[0].startswith("error: ") and message in err[0], err


@needs_libtpu
@pytest.mark.parametrize("argv, message", [
    (["--topology=v5e-4", "--config.mesh.data=3"], "has 3 devices but 4 are available"),
    (["--topology=v5e-4", "--config.model.attention=gpu_flash"], "a TPU cannot run"),
    (["--topology=v5e-4", "--slices=2"], "no mesh axis spans slices; set mesh.dcn_data=2"),
])
def test_a_mesh_or_setting_the_slice_cannot_run_is_refused_before_compiling(capsys, argv, message):
  with pytest.raises(SystemExit) as e:
    compile_lib.main([*argv, *SMALL])
  err = capsys.readouterr().err.strip().splitlines()
  assert e.value.code == 2 and len(err) == 1 and message in err[0], err


def test_slices_by_accelerator_type_and_topology():
  assert tpu.target("v5p-128").topology == "v5p:4x4x4" and tpu.target("v5p-128").chips == 64
  assert tpu.target("v4-32").topology == "v4:2x2x4" and tpu.target("v4-32").hosts == 4
  assert tpu.target("v5litepod-16").topology == "v5e:4x4" and tpu.target("v5litepod-16").hosts == 4
  assert tpu.target("v6e-8").hosts == 1 and tpu.target("v5e:2x2").chips == 4
  assert tpu.target("v5p-8", slices=2).describe() == "v5p-8 (v5p:2x2x1 x 2 slices: 8 TPU v5p chips, 2 hosts)"
  assert gpu.target("h100-16").topology == "1x2x8" and gpu.target("h100-4").hosts == 1
  assert gpu.target("v5p-8") is None


@pytest.mark.slow
@needs_cuda_plugin
def test_a_decoder_compiles_for_h100s_without_a_gpu(tmp_path):
  """JAX's CUDA plugin compiles for a described H100 on this CPU machine: the GPU kernel (Triton) chosen, the
  same figures as for a TPU slice."""
  cfg = _config(*SMALL, "--config.mesh.data=2", "--config.mesh.fsdp=4", "--config.data.seq_len=256")
  facts = compile_lib.check(cfg, gpu.target("h100-8"))
  assert facts["devices"] == 8 and facts["attention"] == ["gpu_flash"] and facts["dtype"] == "bfloat16"
  assert facts["fits"] and facts["kernel_calls"] > 0 and 0.9 < facts["flops_ratio"] < 1.1


HLO = """HloModule step

%body (p: (s32[], f32[8,4])) -> (s32[], f32[8,4]) {
  %ag = f32[8,4]{1,0} all-gather(f32[2,4]{1,0} %x), replica_groups=[2,4]<=[8], dimensions={0}
  %ar = (f32[8,4]{1,0}, f32[4]{0}) all-reduce(%ag, %y), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=%add
  %w8 = f32[4,16]{1,0} parameter(1)
  %mm = f32[8,16]{1,0} convolution(%ag, %w8), dim_labels=bf_io->bf
  %b2 = f32[2,8,4]{2,1,0} parameter(2)
  %bmm = f32[2,8,8]{2,1,0} dot(%b2, %b2), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  %img = f32[1,6,3]{2,1,0} parameter(3)
  %k = f32[3,3,5]{2,1,0} parameter(4)
  %conv = f32[1,6,5]{2,1,0} convolution(%img, %k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f
}

%cond2 (q: (s32[], f32[8,4])) -> pred[] {
  %limit = u32[]{:T(128)} constant(10)
  %i = s32[] get-tuple-element(%q), index=0
  ROOT %lt = pred[] compare(%i, %limit), direction=LT
}

%body2 (q: (s32[], f32[8,4])) -> (s32[], f32[8,4]) {
  %a2a = f32[8,4]{1,0} all-to-all(%v), replica_groups=[4,2]<=[8], dimensions={0}
  %c = u32[] get-tuple-element(%q), index=0
  %two = u32[]{:T(128)} constant(2)
  %next = u32[] add(%c, %two)
  ROOT %t2 = (u32[], f32[8,4]) tuple(%next, %a2a)
}

%all-reduce-scatter.1 (input: f32[8,4]) -> f32[2,4] {
  %ar.1 = f32[8,4]{1,0} all-reduce(%input), replica_groups=[2,4]<=[8], to_apply=%add
}

ENTRY %main (a: f32[8,4]) -> f32[8,4] {
  %w = (s32[], f32[8,4]) while(%t), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  %w2 = (s32[], f32[8,4]) while(%t), condition=%cond2, body=%body2
  %s = f32[2,4]{1,0} fusion(%a), kind=kCustom, calls=%all-reduce-scatter.1
  %cp-start = (f32[8,4]{1,0}, f32[8,4]{1,0}, u32[]) collective-permute-start(%a), source_target_pairs={{0,1}}
  %cp-done = f32[8,4]{1,0} collective-permute-done(%cp-start)
}
"""


def test_collectives_are_counted_per_loop_iteration_with_the_bytes_each_device_receives():
  found = compiled.collectives(compiled.Program(HLO))
  assert found["all-gather"] == (3, 3 * 128 * 3 / 4)  # 3 iterations of (n-1)/n of 128 bytes, n = 4.
  assert found["all-reduce"] == (3, 3 * 2 * (128 + 16) * 1 / 2)  # Both operands, twice (n-1)/n, n = 2.
  assert found["reduce-scatter"] == (1, 128 * 3 / 4)  # The TPU compiler's all-reduce keeping one slice.
  assert found["collective-permute"] == (1, 128)  # The start's operand and result are one buffer; done not counted.
  # A loop that XLA gives no trip count (as on TPUs), read from its code: `i < 10`, `i + 2`.
  assert found["all-to-all"] == (5, 5 * 128 / 2)


def test_matmul_flops_count_each_loop_iteration_and_leave_out_a_window_s_padding():
  matmul = 2 * 8 * 16 * 4  # [8, 4] x [4, 16]
  batched = 2 * 2 * 8 * 8 * 4  # 2 x [8, 4] x [4, 8]
  # A width-3 window over 6 positions padded by 1 on each side: 6 * 3 taps, of which 2 read padding.
  convolution = 2 * 1 * 5 * 3 * (6 * 3 - 2)
  assert compiled.matmul_flops(compiled.Program(HLO)) == 3 * (matmul + batched + convolution)


@needs_libtpu
def test_launch_tpu_vm_compiles_for_the_slice_first(capsys, monkeypatch):
  """The launcher builds the run over the slice's devices before anything starts: a mesh the slice's chips
  cannot hold is refused in one line, nothing printed to run. A config file is read where the hosts' flags find
  it, also given from another directory than the repository's (the check looked for it in the repository)."""
  argv = ["tpu-vm", "--name=t", "--zone=z", "--accelerator_type=v5litepod-4", "--workdir=gs://b/r",
          "--config.mesh.data=8", *SMALL]
  for directory, config in ((REPO, []), (os.path.join(REPO, "configs"), ["--config=./quickstart.py"])):
    monkeypatch.chdir(directory)
    with pytest.raises(SystemExit) as e:
      launch.main([*argv, *config])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and not out and len(err.strip().splitlines()) == 1
    assert "has 8 devices but 4 are available" in err


@needs_libtpu
def test_a_mesh_whose_axes_split_the_slice_s_torus_is_made():
  """mixtral_8x7b's fsdp 16 x expert 4 x tensor 4 over v5p-512's 4 x 8 x 8 chips: no grouping of whole torus
  axes gives 4 then 4 after 16, so the mesh splits a physical axis (as it would on the slice itself)."""
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  cfg = _config("--config=mixtral_8x7b")
  mesh = mesh_lib.make_mesh(cfg.mesh, tpu.target("v5p-512").devices())
  assert dict(mesh.shape) == {"data": 1, "stage": 1, "fsdp": 16, "expert": 4, "context": 1, "tensor": 4}
  assert len({d.id for d in mesh.devices.flat}) == 256


@needs_libtpu
def test_two_slices_make_a_mesh_whose_dcn_axis_spans_them():
  """--slices=2 with mesh.dcn_data=2: the data axis crosses the data-center network, the rest stays in a slice."""
  from pretrain.parallel import mesh as mesh_lib  # pylint: disable=g-import-not-at-top
  cfg = _config("--config.mesh.data=2", "--config.mesh.fsdp=4", "--config.mesh.dcn_data=2")
  mesh = mesh_lib.make_mesh(cfg.mesh, tpu.target("v5e-4", slices=2).devices())
  assert dict(mesh.shape) == {"data": 2, "stage": 1, "fsdp": 4, "expert": 1, "context": 1, "tensor": 1}
  for row, devices in enumerate(mesh.devices):  # Each data index is one slice's chips.
    assert {d.slice_index for d in devices.flat} == {row}
