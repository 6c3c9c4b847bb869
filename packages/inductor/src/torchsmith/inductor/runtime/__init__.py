"""What runs a compiled graph: the C++ caller (`wrapper`, its steps written out as one function by
`straight_line`), library calls (`externs`), the Triton kernel loader, compile workers and launchers,
the GPU graph runner (`triton_graph`), CUDA graphs, and the disk caches."""
