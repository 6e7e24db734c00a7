#include "model/make_model.h"

#include "core/format.h"
#include "core/error.h"
#include "model/mlp.h"

namespace amp {

std::unique_ptr<Model> make_model(const Config& cfg, const Dataset& train, DeviceMemory& mem, ComputeOps& ops,
                                  DType compute, size_t max_rows, size_t bytes_available) {
  MlpOptions opt;
  opt.dims.push_back(train.n_features);
  for (int64_t h : cfg.model.hidden) opt.dims.push_back(size_t(h));
  opt.dims.push_back(train.n_outputs());
  opt.activation = cfg.model.activation;
  opt.init = cfg.model.init;
  opt.init_std = cfg.model.init_std;
  opt.task = train.task;

  size_t bytes = 0, params = 0;
  const bool fits = Mlp::bytes_needed(opt.dims, max_rows, compute, &bytes, &params);
  if (!fits || (bytes_available > 0 && bytes > bytes_available)) {
    const std::string need = !fits ? std::string("more than 16 EiB") : format_bytes(double(bytes));
    throw Error(ErrorKind::Config,
                strcat("config error: ", cfg.origin.at("model.hidden"), ": model.hidden: a model of layer widths ",
                       opt.dims.front(), "-...-", opt.dims.back(), " (",
                       !fits ? std::string("overflowing") : std::to_string(params), " parameters) at batch ", max_rows,
                       " needs ", need, " per rank; this rank may use ", format_bytes(double(bytes_available)),
                       "; make the model or data.batch_size / data.eval_batch_size smaller"));
  }
  return std::make_unique<Mlp>(mem, ops, std::move(opt), compute, max_rows);
}

}  // namespace amp
