#!/usr/bin/env bash
# Regenerates DejaVuSans-subset.ttf (the font rtlab embeds for plot text) from Debian's
# fonts-dejavu-core. Needs: apt-get install fonts-dejavu-core; pip install fonttools.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
[ -f "$src" ] || { echo "error: $src missing (apt-get install fonts-dejavu-core)" >&2; exit 1; }
command -v pyftsubset >/dev/null || { echo "error: pyftsubset missing (pip install fonttools)" >&2; exit 1; }
# printable ASCII plus ± µ · × – − ≤ ≥
pyftsubset "$src" \
	--unicodes="U+0020-007E,U+00B1,U+00B5,U+00B7,U+00D7,U+2013,U+2212,U+2264,U+2265" \
	--layout-features='' --no-hinting --desubroutinize \
	--output-file="$here/DejaVuSans-subset.ttf"
echo "wrote $here/DejaVuSans-subset.ttf"
