#include "train/sample_command.h"

#include <cmath>
#include <cstdio>
#include <thread>

#include "backend/backend.h"
#include "config/config.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/tokenizer.h"
#include "model/make_model.h"
#include "model/sampling.h"
#include "train/checkpoint.h"
#include "train/checkpoint_model.h"
#include "train/sample_text.h"
#include "train/working_weights.h"

namespace amp {

void run_sample(const SampleRequest& r) {
  const Checkpoint ck = load_checkpoint_header(r.checkpoint);  // the masters left in the file too
  const Config cfg = checkpoint_config(ck);
  if (cfg.model.type != ModelType::Gpt)
    throw Error(ErrorKind::Config, strcat("config error: ", r.checkpoint, ": the checkpoint holds a model of type ",
                                          cfg.model.type == ModelType::Mlp ? "mlp" : "?",
                                          "; sampling needs a language model (model.type gpt)"));
  // What the data set told the model: its vocabulary (the token embedding's rows) and tokenizer.
  Dataset shape;
  shape.task = Task::LanguageModel;
  shape.seq_len = shape.n_features = size_t(cfg.model.seq_len);
  const size_t vocab = cfg.model.vocab_size > 0 ? size_t(cfg.model.vocab_size) : checkpoint_rows(ck, "wte.weight");
  if (vocab == 0 || vocab > size_t(INT32_MAX))
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", r.checkpoint, ": its layout has no token embedding (wte.weight)"));
  shape.vocab = int(vocab);
  shape.tokenizer = data_tokenizer_name(cfg.data.tokenizer, cfg.data.format);

  const int threads = r.threads > 0 ? r.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const std::unique_ptr<Backend> be = make_backend(r.device, 0, threads);
  const DType compute = cfg.precision.compute;
  const std::unique_ptr<Model> model =
      make_model(cfg, shape, be->memory(), be->ops(), compute, 1, 1, be->memory().memory_available(1));
  const ParamLayout& L = model->layout();
  // The masters a piece at a time, cast into the working weights as they are read.
  const WorkingWeights weights(*be, *checkpoint_master_pieces(ck, L), L.total, compute);
  const void* params = weights.params();
  // FP8 compute: the linear layers cast with the scales the run ended with (bf16 without them).
  std::unique_ptr<FixedFp8Scales> fp8;
  if (const std::vector<Fp8Tensor> tensors = model->fp8_tensors(); !tensors.empty()) {
    std::string why;
    const std::vector<float> scales = checkpoint_fp8_scales(ck, tensors, &why);
    if (scales.empty())
      std::fprintf(stderr, "note: precision.compute fp8: %s %s; sampling in bf16\n", r.checkpoint.c_str(), why.c_str());
    else
      fp8 = std::make_unique<FixedFp8Scales>(*be, *model, scales, cfg.precision.fp8_params.native_gemm);
  }

  const std::string prompt_text = r.prompt ? *r.prompt : cfg.sample.prompt;
  const std::vector<int32_t> prompt = encode_prompt(shape.tokenizer, prompt_text, shape.vocab,
                                                    r.prompt ? std::string("--prompt") : r.checkpoint, "sample.prompt");
  SampleOptions o;
  o.tokens = size_t(r.tokens ? *r.tokens : (cfg.sample.tokens > 0 ? cfg.sample.tokens : 200));
  o.temperature = r.temperature ? *r.temperature : cfg.sample.temperature;
  o.top_k = size_t(r.top_k ? *r.top_k : cfg.sample.top_k);
  o.top_p = r.top_p ? *r.top_p : cfg.sample.top_p;
  const uint64_t seed = uint64_t(r.seed ? *r.seed : cfg.sample.seed);
  for (int64_t i = 0; i < r.samples; ++i) {
    // A decoder of its own for each sample (the prompt runs again): reusing the last sample's
    // cache would run the prompt's last position alone, other GEMM shapes than a first call's, so
    // sample i could differ from the sample of --seed seed + i.
    const std::unique_ptr<TokenDecoder> decoder = model->decoder(params);
    o.seed = seed + uint64_t(i);
    const std::vector<int32_t> out = generate(prompt, o, [&](const std::vector<int32_t>& context) {
      std::vector<float> logits = decoder->next_logits(context);
      for (const float v : logits)
        if (!std::isfinite(v))
          throw Error(ErrorKind::Divergence, strcat("sample: the weights of ", r.checkpoint, " give non-finite logits (",
                                                    v, ") after ", context.size(), " tokens in ", precision_name(compute),
                                                    " compute"));
      return logits;
    });
    const std::string text = decode_sample(shape.tokenizer, out);
    if (i > 0) std::fputs(kSampleSeparator, stdout);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  }
}

}  // namespace amp
