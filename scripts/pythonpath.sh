# Run torchsmith from source without installing anything (torch, sympy and numpy must already be
# importable):
#
#     source scripts/pythonpath.sh && python -c "import torchsmith.ir"
#
# Puts every packages/*/src on PYTHONPATH. compile_api's torchsmith/__init__.py extends the
# namespace path, so each portion is found whatever the order.
_torchsmith_root="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")/.." && pwd)"
for _torchsmith_src in "$_torchsmith_root"/packages/*/src; do
  PYTHONPATH="$_torchsmith_src${PYTHONPATH:+:$PYTHONPATH}"
done
export PYTHONPATH
unset _torchsmith_root _torchsmith_src
