"""ATen ops kept whole by design, with the reason: a backend calls a library kernel for them, or
their result shape depends on data. `decompose` leaves them in place without an error."""

from torchsmith.prims.decompose import keep_whole

keep_whole(
    "a fused kernel with extra outputs (logsumexp, RNG state); the composite sdpa op decomposes",
    "aten._scaled_dot_product_flash_attention.default",
    "aten._scaled_dot_product_flash_attention_backward.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_efficient_attention_backward.default",
)
keep_whole("a library kernel (grouped GEMM for mixture-of-experts)", "aten._grouped_mm.default")
keep_whole("a library kernel: backends call their convolution backward", "aten.convolution_backward.default")
keep_whole("a library kernel (sorting network / selection)", "aten.sort.default", "aten.topk.default")
keep_whole("its result shape depends on the data", "aten.nonzero.default")
keep_whole(
    "draws from the global RNG: prims.philox_rand needs (seed, offset) graph inputs, which autograd_aot "
    "does not thread through graphs yet",
    "aten.rand.default",
    "aten.bernoulli.p",
    "aten.native_dropout.default",
)
keep_whole(
    "an arbitrary strided view has no counterpart among the as_strided-free shape "
    "prims; functionalization replaces most uses",
    "aten.as_strided.default",
)
