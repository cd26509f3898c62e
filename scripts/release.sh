#!/usr/bin/env bash
# A release of the workspace's version from a clean checkout, into dist/:
#
#   dist/<name>-x86_64-linux-gnu.tar.gz   the binaries (`--version` prints the version and
#        the commit), LICENSE-MIT, LICENSE-APACHE, the system libraries' licence notices,
#        README.md, CHANGELOG.md, sbom/ and deploy/ with every overlay's images pinned by
#        digest
#   dist/images/<binary>-<version>.oci.tar   the container images as OCI archives (push one
#        with `skopeo copy --preserve-digests oci-archive:FILE docker://REGISTRY/…:<version>`:
#        the registry then holds the digest the manifests pin; a `podman push` recompresses
#        the layers and changes it)
#   dist/sbom/<binary>.cdx.json   a CycloneDX SBOM of each binary (cargo-cyclonedx, from
#        crates.io; installed when missing)
#   dist/SHA256SUMS
#
# <name> is ufrag-relay-<version> when HEAD is tagged v<version> (a release: CHANGELOG.md
# must then have a heading for the version), else ufrag-relay-<version>-snapshot-<commit>
# (what CI makes of every change). The images are built and carry one real session first
# (scripts/images.sh, on these binaries). Refuses a tree with uncommitted changes: a
# release is of a commit. Runs as root (podman).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib/notices.sh

fail() {
  echo "!! release.sh: $*" >&2
  exit 1
}

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
changes=$(git status --porcelain --untracked-files=no) || fail "git status failed"
[ -z "$changes" ] || fail "the tree has uncommitted changes: a release is of a commit (git status)"
# Every binary built below says this commit (`--version`): ufrag-version's build script
# reads it from git.
commit=$(git rev-parse --short=12 HEAD)
if [ "$(git tag --points-at HEAD --list "v$version")" = "v$version" ]; then
  name=ufrag-relay-$version
  grep -q "^## \[$version\]" CHANGELOG.md ||
    fail "HEAD is tagged v$version but CHANGELOG.md has no heading for it (## [$version] - DATE)"
  echo "== ufrag-relay $version, release (HEAD is tagged v$version), commit $commit"
else
  name=ufrag-relay-$version-snapshot-$commit
  echo "== ufrag-relay $version, snapshot of commit $commit (HEAD is not tagged v$version)"
fi
stamp="$version (commit $commit)"

scripts/images.sh
# After images.sh, which installs podman and runc where they are missing.
source scripts/lib/podman.sh

# What a user installs: the relays, the transceiver and its token tool, the model
# servers, and ufrag-perf (the session smoke test and load test of a deployment).
binaries=(relay-mio relay-afxdp transceiver ufrag-token model-echo model-speaks ufrag-perf)
images=(relay-mio relay-afxdp transceiver)
rm -rf dist
mkdir -p "dist/$name/bin" dist/images dist/sbom

echo "== binaries"
glibc=
for binary in "${binaries[@]}"; do
  path="dist/$name/bin/$binary"
  cp "target/release/$binary" "$path"
  said=$("$path" --version)
  [ "$said" = "$binary $stamp" ] || fail "$binary --version says \"$said\", not \"$binary $stamp\""
  # Only glibc's own libraries, and libopus for the binaries that encode audio.
  others=$(ldd "$path" | awk '{print $1}' |
    grep -Ev '^(linux-vdso\.so\.1|/lib64/ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libgcc_s\.so\.1|libopus\.so\.0)$' || true)
  [ -z "$others" ] || fail "$binary links libraries beyond glibc's and libopus: $others"
  # The newest glibc symbol version it needs: the oldest glibc it runs on.
  needs=$(objdump -T "$path" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
  glibc=$(printf '%s\n%s\n' "$glibc" "$needs" | sort -V | tail -1)
  echo "   $said; needs $needs; links $(ldd "$path" | awk '/=>/ {print $1}' | tr '\n' ' ')"
done
# shellcheck disable=SC2046 # one library a word
copy_notices "dist/$name/system-libraries" $(for b in "${binaries[@]}"; do
  ldd "dist/$name/bin/$b" | awk '/=> \// {print $3} /^[ \t]*\/lib/ {print $1}'
done | sort -u)
opus=$(for b in "${binaries[@]}"; do
  case "$(ldd "dist/$name/bin/$b")" in *libopus*) echo "$b" ;; esac
done | paste -sd, | sed 's/,/, /g')
printf 'These binaries need glibc %s or later (x86_64), and libopus 0 for: %s.\nsystem-libraries/ holds the licence notices of the libraries they link.\n' \
  "${glibc#GLIBC_}" "${opus:-none}" >"dist/$name/REQUIREMENTS"
echo "   all need ${glibc/_/ } or later"

echo "== images"
declare -A digests
for binary in "${images[@]}"; do
  image="localhost/ufrag-relay/$binary:$version"
  said=$("${podman_run[@]}" run --rm --network none "${podman_limits[@]}" "$image" --version)
  [ "$said" = "$binary $stamp" ] || fail "image $image: --version says \"$said\""
  archive="dist/images/$binary-$version.oci.tar"
  podman save -q --format oci-archive -o "$archive" "$image"
  # The digest of the image's manifest, from the archive's own index: what a registry
  # holds after a copy that preserves digests.
  digests[$binary]=$(tar -xOf "$archive" index.json | python3 -c \
    'import json, sys; print(json.load(sys.stdin)["manifests"][0]["digest"])')
  [[ ${digests[$binary]} =~ ^sha256:[0-9a-f]{64}$ ]] || fail "$archive: no digest in index.json"
  echo "   $image@${digests[$binary]} ($(du -h "$archive" | cut -f1))"
done

echo "== deploy/ with the images pinned by digest"
# The committed deploy/ only: nothing a local edit left beside it.
git archive HEAD deploy | tar -x -C "dist/$name"
pins=()
for binary in "${images[@]}"; do pins+=("$binary=${digests[$binary]}"); done
mapfile -d '' kustomizations < <(find "dist/$name/deploy" -name kustomization.yaml -print0)
# Each kustomization's `images:` entry of ours: its newTag becomes the image's digest.
python3 - "$version" "${pins[*]}" "${kustomizations[@]}" <<'PY'
import re, sys
version, pins, *files = sys.argv[1:]
for path in files:
    text = open(path).read()
    for pin in pins.split():
        binary, digest = pin.split("=")
        entry = re.compile(r"(- name: localhost/ufrag-relay/" + re.escape(binary)
                           + r"\n(?:\s+newName: .*\n)?)(\s+)newTag: " + re.escape(version) + r"\n")
        text = entry.sub(lambda m: f"{m.group(1)}{m.group(2)}digest: {digest}\n", text)
    open(path, "w").write(text)
PY
unpinned=$(grep -rn "newTag:" "dist/$name/deploy" || true)
[ -z "$unpinned" ] || fail "an image left pinned by tag, not digest: $unpinned"
echo "   $(grep -rl "digest: sha256:" "dist/$name/deploy" | wc -l) kustomizations pinned"

echo "== SBOM (CycloneDX)"
if ! cargo cyclonedx --version >/dev/null 2>&1; then
  echo "   installing cargo-cyclonedx from crates.io"
  cargo install -q --locked cargo-cyclonedx@0.5.7
fi
# One SBOM per binary, written beside each package's Cargo.toml, then moved here.
cargo cyclonedx -q --format json --describe binaries --spec-version 1.5
for binary in "${binaries[@]}"; do
  found=$(find . -path ./target -prune -o -name "${binary}_bin.cdx.json" -print | awk 'NR == 1')
  [ -n "$found" ] || fail "cargo cyclonedx wrote no SBOM for $binary"
  mv "$found" "dist/sbom/$binary.cdx.json"
done
find . -path ./target -prune -o -name '*.cdx.json' ! -path './dist/*' -print0 | xargs -0 rm -f
python3 - dist/sbom/*.cdx.json <<'PY'
import json, sys
for path in sys.argv[1:]:
    bom = json.load(open(path))
    assert bom.get("bomFormat") == "CycloneDX", f"{path}: not a CycloneDX document"
    components = bom.get("components", [])
    assert len(components) > 10, f"{path}: {len(components)} components"
    print(f"   {path}: CycloneDX {bom['specVersion']}, {len(components)} components")
PY
cp -r dist/sbom "dist/$name/"

echo "== archive"
cp LICENSE-MIT LICENSE-APACHE README.md CHANGELOG.md "dist/$name/"
# The same bytes from the same commit: names sorted, times the commit's, owner root.
tar -C dist --sort=name --mtime="@$(git log -1 --format=%ct)" --owner=0 --group=0 --numeric-owner \
  -cf - "$name" | gzip -n >"dist/$name-x86_64-linux-gnu.tar.gz"
rm -rf "dist/${name:?}"
(cd dist && find . -type f ! -name SHA256SUMS -printf '%P\n' | sort | xargs sha256sum >SHA256SUMS)
ls -l dist dist/images
echo "== made $name in dist/"
