#!/usr/bin/env bash
# Grafana's own dashboard and panel types (npm @grafana/schema, pinned in scripts/dashboard-schemas), turned into
# JSON Schema by ts-json-schema-generator, under .aitax/tools/dashboard-schemas/grafana/. Cached: runs again only
# when the lock file changes; also machine-wide, keyed by the lock file, so a fresh clone (CI) copies them instead of
# generating them again (about 80 s). `aitax grafana check` validates the shipped dashboard against them.
set -euo pipefail
cd "$(dirname "$0")/.."
source_dir=scripts/dashboard-schemas
work=.aitax/tools/dashboard-schemas
out=$work/grafana
stamp=$work/.lock.sha256
wanted=$(sha256sum "$source_dir/package-lock.json" | cut -d' ' -f1)
machine="${XDG_CACHE_HOME:-$HOME/.cache}/aitax/tools/dashboard-schemas-$wanted"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ] && [ -f "$out/dashboard.schema.json" ]; then exit 0; fi
if [ -f "$machine/dashboard.schema.json" ]; then
  mkdir -p "$work" && rm -rf "$out" && cp -a "$machine" "$out"
  echo "$wanted" > "$stamp"
  echo "Grafana's schemas ($(cat "$out/VERSION")) in $out, from $machine"
  exit 0
fi
command -v npm >/dev/null || { echo "install-dashboard-schemas: npm not found (Node.js 20 or later)" >&2; exit 1; }
mkdir -p "$work" "$out"
cp "$source_dir/package.json" "$source_dir/package-lock.json" "$work/"
(cd "$work" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
types=$work/node_modules/@grafana/schema/dist/types/raw
generate() {  # TYPE_FILE TYPE OUT
  (cd "$work" && npx --no-install ts-json-schema-generator --path "${1#"$work"/}" --type "$2" --no-type-check \
     -o "${3#"$work"/}" >/dev/null 2>&1)
}
generate "$types/dashboard/x/types.gen.d.ts" Dashboard "$out/dashboard.schema.json"
for panel in "$types"/composable/*/panelcfg/x/types.gen.d.ts; do
  name=$(basename "$(dirname "$(dirname "$(dirname "$panel")")")")
  # A panel whose types the generator cannot resolve (geomap's duplicate MapLayerOptions) gets no schema; the check
  # then refuses a dashboard that uses it, rather than passing it unchecked.
  generate "$panel" Options "$out/panel-$name.options.schema.json" || echo "no schema for panel $name" >&2
  if grep -q "export interface FieldConfig" "$panel"; then
    generate "$panel" FieldConfig "$out/panel-$name.fieldconfig.schema.json" || true
  fi
done
node -e 'console.log(require(process.argv[1]).version)' "$(pwd)/$work/node_modules/@grafana/schema/package.json" \
  > "$out/VERSION"
echo "$wanted" > "$stamp"
mkdir -p "$(dirname "$machine")" && rm -rf "$machine.partial" && cp -a "$out" "$machine.partial" \
  && rm -rf "$machine" && mv "$machine.partial" "$machine"
echo "Grafana's schemas ($(cat "$out/VERSION")) in $out"
