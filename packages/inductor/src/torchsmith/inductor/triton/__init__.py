"""The Triton code generator: loop IR passes for the GPU (`upcast`, `casts`, `split`), kernel source
for pointwise, reduction and matmul-epilogue groups (`codegen`), and the Triton spellings of ops.
Launching and running what it generates is `torchsmith.inductor.runtime`."""
