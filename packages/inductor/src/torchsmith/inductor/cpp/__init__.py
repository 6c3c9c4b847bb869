"""The C++/OpenMP code generator: one translation unit per graph (`codegen`), its expression and
vector spellings, and the build that compiles and loads it (`build`)."""
