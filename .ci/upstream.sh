#!/usr/bin/env bash
# Test material for machines that do not have it beside the repository (GitHub's runners): the
# real OpenShell CLI, gateway and supervisor of the release installed by default (the one of
# fixtures/releases/ saying `installed_by_default: true`; the release's assets, checked against
# the release's own checksum files), the release's helm chart (from its OCI registry), and the
# manifest of the Agent Sandbox release installed with it, all under the git-ignored
# .tools/upstream/. Prints the variables the tests read (harness/testtools) as NAME=value lines,
# for $GITHUB_ENV.
# Needs curl, and helm from .ci/tools.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

release_file=$(grep -l '^installed_by_default: true' fixtures/releases/*.yaml)
[ "$(echo "$release_file" | wc -l)" = 1 ] || { echo "one release must be installed by default: $release_file" >&2; exit 1; }
OPENSHELL=v$(sed -n 's/^openshell: *\([^ #]*\).*/\1/p' "$release_file")
AGENT_SANDBOX=$(awk '/^agent_sandbox:/ {s = 1; next} /^[^ #]/ {s = 0} s && /^ *install:/ {print $2; exit}' "$release_file")
[ "$OPENSHELL" != v ] && [ -n "$AGENT_SANDBOX" ] || { echo "$release_file: no openshell or agent_sandbox.install" >&2; exit 1; }
# The release's core asset: manifest.yaml up to v0.5.1, sandbox.yaml from v0.5.2 on
# (docs/upstream-facts.md F8.6); kept locally as manifest.yaml, where the tests look.
if [ "$(printf '%s\n' "$AGENT_SANDBOX" v0.5.1 | sort -V | head -n1)" = "$AGENT_SANDBOX" ]; then
  agent_sandbox_asset=manifest.yaml
else
  agent_sandbox_asset=sandbox.yaml
fi
dir="$PWD/.tools/upstream"
mkdir -p "$dir/bin" "$dir/download"

release="https://github.com/NVIDIA/OpenShell/releases/download/${OPENSHELL}"
# asset (without .tar.gz), checksum file, binary inside
assets=(
  "openshell-x86_64-unknown-linux-musl openshell-checksums-sha256.txt openshell"
  "openshell-gateway-x86_64-unknown-linux-gnu openshell-gateway-checksums-sha256.txt openshell-gateway"
  "openshell-sandbox-x86_64-unknown-linux-gnu openshell-sandbox-checksums-sha256.txt openshell-sandbox"
)
for line in "${assets[@]}"; do
  read -r asset sums bin <<<"$line"
  if [ ! -x "$dir/bin/$bin" ]; then
    echo "+ fetch $asset.tar.gz (OpenShell $OPENSHELL)" >&2
    (
      cd "$dir/download"
      curl -fsSLO "$release/$asset.tar.gz"
      curl -fsSLO "$release/$sums"
      sha256sum -c --ignore-missing "$sums" >&2
      tar -xzf "$asset.tar.gz" -C "$dir/bin" "$bin"
    )
  fi
done

chart="$dir/chart-${OPENSHELL}"
if [ ! -f "$chart/helm-chart/Chart.yaml" ]; then
  echo "+ helm pull the OpenShell chart ${OPENSHELL#v}" >&2
  rm -rf "$chart"
  .tools/bin/helm pull oci://ghcr.io/nvidia/openshell/helm-chart --version "${OPENSHELL#v}" \
    --untar --untardir "$chart" >&2
fi

manifest="$dir/agent-sandbox-${AGENT_SANDBOX}/manifest.yaml"
if [ ! -s "$manifest" ]; then
  echo "+ fetch the Agent Sandbox ${AGENT_SANDBOX} manifest" >&2
  mkdir -p "$(dirname "$manifest")"
  curl -fsSLo "$manifest" \
    "https://github.com/kubernetes-sigs/agent-sandbox/releases/download/${AGENT_SANDBOX}/${agent_sandbox_asset}"
fi

echo "OPENSHELL_BIN=$dir/bin/openshell"
echo "OPENSHELL_GATEWAY_BIN=$dir/bin/openshell-gateway"
echo "OPENSHELL_SANDBOX_BIN=$dir/bin/openshell-sandbox"
echo "OPENSHELL_CHART_PATH=$chart/helm-chart"
echo "AGENT_SANDBOX_MANIFEST=$manifest"
