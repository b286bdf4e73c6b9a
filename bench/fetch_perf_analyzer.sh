#!/bin/sh
# Unpack perf_analyzer from the tritonclient 2.51.0 manylinux wheel into bench/.cache/
# (never installed into the venv: the project uses tritonclient 2.73) and link the
# two libraries it needs to the copies the nvidia-pytriton wheel bundles.
set -eu
cd "$(dirname "$0")/.."
CACHE=bench/.cache
LIBS=$(.venv/bin/python -c 'import nvidia_pytriton.libs, os; print(os.path.dirname(nvidia_pytriton.libs.__file__))' 2>/dev/null \
  || echo .venv/lib/python3.11/site-packages/nvidia_pytriton.libs)
mkdir -p "$CACHE/lib"
if [ ! -x "$CACHE/perf_analyzer" ]; then
  .venv/bin/pip download --no-deps tritonclient==2.51.0 -d "$CACHE" -q
  unzip -o -j -q "$CACHE"/tritonclient-2.51.0-py3-none-manylinux1_x86_64.whl \
    tritonclient-2.51.0.data/data/bin/perf_analyzer -d "$CACHE"
  chmod +x "$CACHE/perf_analyzer"
fi
# The bundled libs carry hashed names (auditwheel); perf_analyzer wants the plain sonames.
ln -sf "$(realpath "$LIBS"/libb64-*.so.0d)" "$CACHE/lib/libb64.so.0d"
ln -sf "$(realpath "$LIBS"/libcudart-*.so.12*)" "$CACHE/lib/libcudart.so.12"
LD_LIBRARY_PATH="$CACHE/lib" ldd "$CACHE/perf_analyzer" | grep "not found" && exit 1
echo "perf_analyzer ready: $CACHE/perf_analyzer (LD_LIBRARY_PATH=$CACHE/lib)"
