// Writes the reference GPT-2 token ids of a text, one id per line, with js-tiktoken (a JavaScript
// port of OpenAI's tiktoken) and its "gpt2" encoding: what tests/unit/test_gpt2_bpe.cpp compares
// amp_ddp's tokenizer with. Run once when the reference text changes; CI needs no JavaScript.
//   npm install --prefix /tmp/jsref js-tiktoken@1.0.21
//   NODE_PATH=/tmp/jsref/node_modules node scripts/gpt2_reference_ids.mjs tests/data/gpt2_reference.txt \
//       > tests/data/gpt2_reference.ids
// The text is read as UTF-8 (it must be valid: the JavaScript tokenizer works on strings).
import { createRequire } from "module";
import { readFileSync } from "fs";

const require = createRequire(process.env.NODE_PATH ? process.env.NODE_PATH + "/" : import.meta.url);
const { getEncoding } = require("js-tiktoken");
const bytes = readFileSync(process.argv[2]);
const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
const ids = getEncoding("gpt2").encode(text);
process.stdout.write(ids.join("\n") + "\n");
