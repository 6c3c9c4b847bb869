"""ATen ops kept whole by design, with the reason: a backend calls a library kernel for them, or
their result shape depends on data. `decompose` leaves them in place without an error."""

from torchsmith.prims.decompose import RANDOM_OPS, keep_whole

keep_whole(
    "a fused kernel with extra outputs (logsumexp, RNG state); the composite sdpa op decomposes",
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_flash_attention_backward.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_efficient_attention_backward.default",
    "aten._scaled_dot_product_cudnn_attention.default",
    "aten._scaled_dot_product_cudnn_attention_backward.default",
)
keep_whole("a library kernel (grouped GEMM for mixture-of-experts)", "aten._grouped_mm.default")
keep_whole("a library kernel (sorting network / selection)", "aten.sort.default", "aten.topk.default")
keep_whole("its result shape depends on the data", "aten.nonzero.default")
keep_whole(
    "draws from the global RNG; decompose(..., philox=True) draws with prims.philox_rand from (seed, offset) "
    "graph inputs instead, which the caller must feed (autograd_aot does not yet)",
    *sorted(RANDOM_OPS),
)
keep_whole(
    "an arbitrary strided view has no counterpart among the as_strided-free shape "
    "prims; functionalization replaces most uses",
    "aten.as_strided.default",
    "aten.as_strided_scatter.default",
)
keep_whole(
    "its decomposition (prims.convolution of the gradient, and of the input with the gradient) sums in "
    "another order than eager's backward kernel and can land farther from float64 than eager's weight "
    "gradient does; backends without a kernel pass force={op}",
    "aten.convolution_backward.default",
)
