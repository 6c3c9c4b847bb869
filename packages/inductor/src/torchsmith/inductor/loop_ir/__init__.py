"""The loop IR: buffers defined by index expressions over ranges (`program`), its JSON form
(`serialize`), index arithmetic (`index_math`, `simplify`) and its verifier (`verify`)."""
