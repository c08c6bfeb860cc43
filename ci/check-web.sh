#!/usr/bin/env bash
# Checks rtcat-web (app/web, issue 32): the page's committed build is what its sources build,
# the Rust checks of the crate when run standalone, and the browser test — headless Chromium
# (Debian's chromium, driven by playwright-core from npm) against rtcat-web in front of three
# simulated masters (app/web/ui/test/e2e.mjs says what it checks). Screenshots, the programs'
# logs and the measured figures go to out/web/. About a minute once the binaries are built.
set -euo pipefail
# shellcheck source=ci/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$RTCAT_TOP"

step "web: install chromium, shellcheck (and Node.js/npm where the machine has none)"
ensure_apt chromium shellcheck
command -v npm >/dev/null || ensure_apt nodejs npm

step "web: shellcheck"
shellcheck -x ci/check-web.sh

step "web: no paths of the build machine in committed files"
if git grep -n -E '/(work|root)/' -- app/web; then
	die "machine-specific paths committed under app/web"
fi

step "web: npm ci (esbuild, preact, playwright-core; no browser download)"
(cd app/web/ui && npm ci --no-audit --no-fund --loglevel=error)

step "web: the committed page (app/web/ui/dist, embedded in the binary) is what its sources build"
(cd app/web/ui && npm run -s build >/dev/null)
if ! git diff --exit-code --stat -- app/web/ui/dist; then
	die "app/web/ui/dist differs from a build of app/web/ui/src: run 'npm run build' in app/web/ui and commit dist/"
fi

# ci/test.sh's rust area runs fmt, clippy and every test of the workspace first and sets
# RTCAT_WORKSPACE_CHECKED; run standalone, this script does the rtcat-web part itself.
if [ -z "${RTCAT_WORKSPACE_CHECKED:-}" ]; then
	step "web: cargo fmt, clippy, tests of rtcat-web (HTTP limits and timeouts, auth, CSRF, rate limit, events)"
	cargo fmt -p rtcat-web --check
	cargo clippy -q --locked -p rtcat-web --all-targets -- -D warnings
	cargo test -q --locked -p rtcat-web
fi

step "web: build rtcat and rtcat-web"
rtcat=$(host_rtcat) || die "building rtcat failed"
cargo build -q --locked -p rtcat-web
web="$(cargo_target_dir)/debug/rtcat-web"

step "web: the browser test (headless Chromium)"
rm -rf out/web
mkdir -p out/web
top=$RTCAT_TOP
RTCAT="$rtcat" RTCAT_WEB="$web" RTCAT_TOP="$top" OUT="$top/out/web" \
	timeout 300 node app/web/ui/test/e2e.mjs
echo "web: screenshots and logs in out/web/"
