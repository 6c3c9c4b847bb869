#!/usr/bin/env bash
# The GPU measurements of issue 20, run from source on a machine with torch, Triton and a GPU but
# nothing of ours installed (the device machine: no network, no pip install). One part per call,
# each within a 10-minute command limit; results land in $OUT (default: benchmarks/results/gpu_run).
#
#   bash benchmarks/gpu_session.sh bf16     # the whole GPU suite in bfloat16, one measuring process
#   bash benchmarks/gpu_session.sh fp32     # the same in float32
#   bash benchmarks/gpu_session.sh decode   # Llama-style decode steps (bench_decode.py), reduce-overhead
#   bash benchmarks/gpu_session.sh conv     # conv_bn_relu and resnet_stack in both dtypes, 5 rounds
#   bash benchmarks/gpu_session.sh modes    # bf16 MLP, attention, GPT-2, MLP training in reduce-overhead,
#                                           # GPT-2 in max-autotune (the issue's other two modes)
#   bash benchmarks/gpu_session.sh cold     # bf16 cold first calls in fresh processes: the training steps,
#                                           # GPT-2 and the Llama prefill (empty caches each)
#   bash benchmarks/gpu_session.sh tests    # the test files whose cases need a GPU (CUDA graphs, fused
#                                           # attention, Triton kernels compiled for real)
#
# One measuring process per suite (--one-process): its first calls stand in for cold compiles in a
# started process. Each part prints where its files are; copy them into benchmarks/results/.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHONPATH="$(printf '%s:' "$PWD"/packages/*/src)${PYTHONPATH:-}"
export PYTHONPATH
out="${OUT:-$PWD/benchmarks/results/gpu_run}"
mkdir -p "$out"
# torchsmith's C++ extensions are built once into this folder (bench scripts load them before timing)
export TORCHSMITH_NATIVE_DIR="${TORCHSMITH_NATIVE_DIR:-$HOME/.cache/torchsmith/native}"

suite() {  # dtype, per-process timeout
  python benchmarks/bench_inductor.py --device cuda --dtype "$1" --one-process --no-cold --no-bandwidth \
    --repeat 3 --timeout "$2" --out "$out/inductor_cuda_$1.md"
}

case "${1:-}" in
  bf16) suite bfloat16 "${TIMEOUT:-540}" ;;
  fp32) suite float32 "${TIMEOUT:-540}" ;;
  decode)
    python benchmarks/bench_decode.py --rounds 5 --timeout "${TIMEOUT:-170}" --out "$out/decode_cuda"
    python benchmarks/bench_decode.py --rounds 3 --compilers torch.compile-default,torchsmith-default \
      --timeout "${TIMEOUT:-170}" --out "$out/decode_cuda_default" || true
    ;;
  conv)
    for dtype in float32 bfloat16; do
      python benchmarks/bench_inductor.py --device cuda --dtype "$dtype" --one-process --no-cold \
        --no-bandwidth --repeat 5 --only conv_bn_relu --only resnet_stack --timeout 240 \
        --out "$out/conv_$dtype.md"
    done
    ;;
  modes)
    python benchmarks/bench_inductor.py --device cuda --dtype bfloat16 --one-process --no-cold --no-bandwidth \
      --repeat 3 --mode reduce-overhead --only mlp --only attention --only gpt2 --only mlp_train --timeout 280 \
      --out "$out/inductor_cuda_bfloat16_reduce_overhead.md"
    python benchmarks/bench_inductor.py --device cuda --dtype bfloat16 --one-process --no-cold --no-bandwidth \
      --repeat 3 --mode max-autotune --only gpt2 --timeout 280 --out "$out/inductor_cuda_bfloat16_max_autotune.md"
    ;;
  cold)
    python benchmarks/bench_inductor.py --device cuda --dtype bfloat16 --one-process --no-bandwidth --repeat 1 \
      --only mlp_train --only encoder_train --only gpt2 --only llama_prefill --timeout 120 \
      --out "$out/inductor_cuda_bfloat16_cold.md"
    ;;
  tests)
    # every test file with cases that run only on a GPU (`grep -l "cuda.is_available" ...`)
    python -m pytest -q -p no:cacheprovider \
      packages/inductor/tests/test_triton_runtime.py packages/inductor/tests/test_in_place_updates.py \
      packages/inductor/tests/test_buffer_reuse.py packages/inductor/tests/test_input_derived.py \
      packages/inductor/tests/test_conv_fold.py packages/inductor/tests/test_triton_wide_reductions.py \
      packages/inductor/tests/test_complex_values.py packages/inductor/tests/test_aligned_columns.py \
      packages/inductor/tests/test_bias_matmul.py packages/inductor/tests/test_sink.py \
      packages/inductor/tests/test_triton_workers.py packages/inductor/tests/test_triton_kernels.py \
      packages/inductor/tests/test_triton_row_blocks.py packages/inductor/tests/test_lowerings_scan.py \
      packages/inductor/tests/test_size_outputs.py packages/autograd_aot/tests/test_cuda_training_attention.py \
      packages/autograd_aot/tests/test_models.py packages/capture/tests/test_cuda.py \
      packages/prims/tests/test_cuda.py packages/compile_api/tests/test_cuda_attention.py \
      tests/test_decode.py tests/test_folded_copy.py 2>&1 | tee "$out/gpu_tests.txt" | tail -20
    ;;
  *)
    echo "usage: bash benchmarks/gpu_session.sh bf16|fp32|decode|conv|modes|cold|tests" >&2
    exit 2
    ;;
esac
ls -l "$out"
