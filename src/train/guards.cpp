#include "train/guards.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/hash.h"

namespace amp {

Guards::Guards(const Config& cfg, Communicator& world, Backend& be) : cfg_(cfg), world_(world), be_(be) {}

void Guards::bind(const ParamLayout& layout) {
  layout_ = &layout;
  flag_ = be_.memory().alloc(sizeof(int32_t));
}

std::string Guards::ranks_differing_from_0(uint64_t mine, uint64_t* rank0) {
  std::vector<uint64_t> all(static_cast<size_t>(world_.size()));
  world_.allgather(&mine, all.data(), sizeof mine);
  std::string differ;
  for (int r = 1; r < world_.size(); ++r)
    if (all[size_t(r)] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  *rank0 = all[0];
  return differ;
}

void Guards::check_ranks_agree(uint64_t data_digest, const std::string& data_source) {
  uint64_t rank0 = 0;
  std::string differ = ranks_differing_from_0(config_hash(cfg_), &rank0);
  if (!differ.empty())
    throw Error(ErrorKind::Comm,
                "communication error: ranks disagree on the configuration: rank(s) " + differ +
                    " resolved a different config (or program version) than rank 0 (" + hex64(rank0) +
                    "); start every rank with the same config, --set and binary",
                true);
  differ = ranks_differing_from_0(data_digest, &rank0);
  if (!differ.empty())
    throw Error(ErrorKind::Data,
                strcat("data error: rank(s) ", differ, " loaded different data than rank 0 (digest ", hex64(rank0),
                       ") from the same paths (", data_source, "): each node must hold identical copies of the data files"),
                true);
}

void Guards::check_params_in_sync(int64_t step, uint64_t params_hash) {
  uint64_t rank0_hash = 0;
  const std::string differ = ranks_differing_from_0(params_hash, &rank0_hash);
  if (!differ.empty())
    throw Error(ErrorKind::Comm,
                strcat("communication error: ranks diverged: after step ", step, " the master weights of rank(s) ", differ,
                       " differ from rank 0's (hash ", hex64(rank0_hash), "); the all-reduce or an update was not "
                       "identical on every rank"),
                true);
}

void Guards::check_fp8_in_sync(int64_t step, uint64_t fp8_hash) {
  uint64_t rank0_hash = 0;
  const std::string differ = ranks_differing_from_0(fp8_hash, &rank0_hash);
  if (!differ.empty())
    throw Error(ErrorKind::Comm,
                strcat("communication error: ranks diverged: after step ", step, " the FP8 scales and amax histories of "
                       "rank(s) ", differ, " differ from rank 0's (hash ", hex64(rank0_hash), "); the amaxes were not "
                       "reduced alike on every rank"),
                true);
}

void Guards::check_finite_weights(int64_t step, const float* master, const std::vector<TensorSpan>& spans,
                                  size_t count) {
  be_.memory().zero(flag_.data(), sizeof(int32_t));
  be_.amp_kernels().find_nonfinite(master, DType::F32, spans, 0, count, flag_.as<int32_t>());
  int32_t bad = 0;
  be_.memory().download(&bad, flag_.data(), sizeof bad);
  // Every rank holds the same weights (or its shard of them); the MAX makes the verdict common.
  if (world_.size() > 1) world_.allreduce(BufView{&bad, 1, DType::I32}, ReduceOp::Max);
  if (bad > 0)
    throw Error(ErrorKind::Divergence,
                strcat("divergence error: after step ", step, " the FP32 master weights of ",
                       layout_->tensors[size_t(bad - 1)].name,
                       " are not finite: an update overflowed. Lower optimizer.lr or enable optimizer.grad_clip"),
                true);
}

void Guards::check_loss(int64_t step, double loss, double first_loss, double uniform_loss) const {
  if (!std::isfinite(loss))
    throw Error(ErrorKind::Divergence,
                strcat("divergence error: the mean training loss of the interval ending at step ", step, " is ", loss,
                       " (the forward pass overflowed or the weights diverged). Lower optimizer.lr",
                       cfg_.precision.compute == DType::F16 ? ", enable optimizer.grad_clip, or use bf16"
                                                            : " or enable optimizer.grad_clip"),
                true);
  // A cross-entropy far above the uniform prediction's that has also risen above step 1's is
  // confidently wrong and getting worse: a diverged run gets there at once (a GPT at 3000 nats, 5.5
  // uniform), a healthy one never (it may start far above uniform, with a wide initialization, but
  // falls from there).
  const double vs_uniform = cfg_.run.max_loss_vs_uniform;
  if (vs_uniform > 0 && uniform_loss > 0 && loss > vs_uniform * uniform_loss && (first_loss <= 0 || loss > first_loss))
    throw Error(ErrorKind::Divergence,
                strcat("divergence error: the mean training loss reached ", loss, " at step ", step, ", more than ",
                       vs_uniform, " times the loss of predicting every class alike (ln of the classes: ", uniform_loss,
                       "; run.max_loss_vs_uniform) and above step 1's (", first_loss,
                       "). Lower optimizer.lr or enable optimizer.grad_clip"),
                true);
  const double ratio = cfg_.run.max_loss_ratio;
  if (ratio > 0 && first_loss > 0 && loss > ratio * first_loss)
    throw Error(ErrorKind::Divergence,
                strcat("divergence error: the mean training loss reached ", loss, " at step ", step, ", more than ", ratio,
                       " times the loss of step 1 (", first_loss,
                       "; run.max_loss_ratio). Lower optimizer.lr or enable optimizer.grad_clip"),
                true);
}

}  // namespace amp
