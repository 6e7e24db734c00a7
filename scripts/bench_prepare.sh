#!/usr/bin/env bash
# Data preparation's speed: `amp_ddp prepare` (GPT-2's BPE) on every text of Debian's fortunes
# package plus the GPL-3 (about 5 MB of English, each cookie a document) on 1 and 2 threads, next to
# the peer measured in the same run: js-tiktoken 1.0.21 (a JavaScript port of OpenAI's tiktoken,
# from the npm registry, in Node.js) encoding the same documents on one thread. Prints MB of text
# per second of encoding (amp_ddp: reading, encoding and writing the shards; the tokenizer's
# loading is reported apart) and the ratio to the peer; the two token counts must agree.
# Usage: scripts/bench_prepare.sh   (needs node and npm for the peer; scripts/setup.sh --gpt2 first)
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
files=($(grep -o '/usr/share/games/fortunes/[a-z-]*$' configs/gpt_fortunes_fp16.yaml) /usr/share/common-licenses/GPL-3)
for t in 1 2; do
  build/amp_ddp prepare "${files[@]}" --doc-separator % -o "$work/out$t" --threads $t -q > "$work/amp$t.txt"
  echo "amp_ddp prepare, $t thread(s): $(head -1 "$work/amp$t.txt")"
done
if command -v node >/dev/null && command -v npm >/dev/null; then
  npm install --silent --prefix "$work/js" js-tiktoken@1.0.21 >/dev/null 2>&1
  cat > "$work/peer.mjs" <<'JS'
import { createRequire } from "module";
import { readFileSync } from "fs";
const require = createRequire(process.env.NODE_PATH + "/");
const { getEncoding } = require("js-tiktoken");
const enc = getEncoding("gpt2");
const docs = [];
let bytes = 0;
for (const f of process.argv.slice(2)) {
  const text = readFileSync(f, "utf8");   // the fortunes and the GPL are valid UTF-8
  bytes += Buffer.byteLength(text);
  for (const d of text.split(/^%\n/m)) if (d.length) docs.push(d);
}
const t0 = process.hrtime.bigint();
let tokens = 0;
for (const d of docs) tokens += 1 + enc.encode(d).length;
const s = Number(process.hrtime.bigint() - t0) / 1e9;
console.log(JSON.stringify({ peer: "js-tiktoken 1.0.21 gpt2, node " + process.version, docs: docs.length, tokens, bytes, seconds: s }));
JS
  NODE_PATH="$work/js/node_modules" node "$work/peer.mjs" "${files[@]}" > "$work/peer.json"
  python3 - "$work" <<'PY'
import json, re, sys
w = sys.argv[1]
peer = json.load(open(f"{w}/peer.json"))
prate = peer["bytes"] / peer["seconds"] / 1e6
print(f"peer: {peer['peer']}, 1 thread: {prate:.1f} MB/s, {peer['docs']} documents, {peer['tokens']} tokens")
for t in (1, 2):
    line = open(f"{w}/amp{t}.txt").readline()
    m = re.search(r"of text in .*?\((\S+) (\S+)/s.*?\): (\d+) validation tokens .*?, (\d+) training tokens", line)
    rate = float(m.group(1)) * {"B": 1, "KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)] / 1e6
    tokens = int(m.group(3)) + int(m.group(4))
    print(f"amp_ddp {t} thread(s): {rate:.1f} MB/s = {rate / prate:.2f}x the peer; tokens {tokens}"
          f" ({'the same count' if tokens == peer['tokens'] else 'DIFFERENT from the peer'})")
PY
else
  echo "peer skipped: node and npm are not installed"
fi
