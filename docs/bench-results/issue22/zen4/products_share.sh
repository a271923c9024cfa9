#!/bin/bash
# products' share of a perf profile: OpenBLAS, and [JIT] code not named lazytrace_fused (oneDNN, libxsmm)
perf report -i "$1" --sort=dso,sym --stdio 2>/dev/null | grep -v "^#" | grep "%" | awk '
{ p=$1; sub("%","",p); if ($2 ~ /openblas/ || ($2=="[JIT]" && $0 !~ /lazytrace_fused/)) prod+=p; else if ($0 ~ /lazytrace_fused/) fused+=p; else if ($2 ~ /compute_forward|python|liblazytrace/) lib+=p; else other+=p }
END { printf "products %.1f%%  native fused %.1f%%  library %.1f%%  other %.1f%%  forward/products %.3f\n", prod, fused, lib, other, 100/prod }'
