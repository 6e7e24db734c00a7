// NcclCommunicator's step clock (StepClock, comm/grad_reducer.h): the gradient reducer's
// collectives of a step timed by events, for eager steps and for the launches of a captured graph.
#include "comm/nccl/nccl_impl.h"

namespace amp {

void NcclCommunicator::clock_begin_step() {
  Impl& m = *impl_;
  // A step begun and never waited for (an exception in between) is dropped; destroying its events
  // is safe while their records are pending (CUDA frees them once the records complete).
  if (!m.eager_steps.empty() && !m.eager_steps.back()->closed) m.eager_steps.pop_back();
  m.open_step = nullptr;
  if (is_capturing(m.compute)) {
    // A new capture: the graph of an older one is gone (the backend drops it before capturing),
    // so nothing records that step's events any more.
    m.graph_step = std::make_unique<TimedStep>();
    m.graph_step->in_graph = true;
    m.graph_step->graph = m.owner->graph_id();
    m.shared->captured = true;
    m.open_step = m.graph_step.get();
    return;
  }
  if (m.eager_steps.size() >= kMaxUnreadSteps) m.eager_steps.pop_front();
  std::unique_ptr<TimedStep> t;
  if (!m.spare_steps.empty()) {
    t = std::move(m.spare_steps.back());  // its events were read: their records have completed
    m.spare_steps.pop_back();
  } else {
    t = std::make_unique<TimedStep>();
  }
  t->n = 0;
  t->closed = false;
  m.eager_steps.push_back(std::move(t));
  m.open_step = m.eager_steps.back().get();
}

void NcclCommunicator::clock_wait_begins() {
  Impl& m = *impl_;
  if (m.open_step) m.open_step->mark(m.open_step->wait_begin, m.compute);
}

void NcclCommunicator::clock_wait_ends() {
  Impl& m = *impl_;
  if (!m.open_step) return;
  m.open_step->mark(m.open_step->wait_end, m.compute);
  m.open_step->closed = true;
  m.open_step = nullptr;
}

bool NcclCommunicator::clock_poll(double* comm_seconds, double* exposed_seconds) {
  Impl& m = *impl_;
  if (is_capturing(m.compute)) return false;  // no event queries while a capture is open
  bool got = false;
  // Eager steps complete in issue order: read until the first that has not.
  while (!m.eager_steps.empty() && m.eager_steps.front()->closed) {
    TimedStep& t = *m.eager_steps.front();
    const cudaError_t q = cudaEventQuery(t.wait_end.get());
    if (q == cudaErrorNotReady) {
      cudaGetLastError();
      break;
    }
    if (q == cudaSuccess) got = t.read(comm_seconds, exposed_seconds) || got;
    else cudaGetLastError();  // a device fault surfaces at the next checked call; statistics just skip it
    m.spare_steps.push_back(std::move(m.eager_steps.front()));
    m.eager_steps.pop_front();
  }
  // The captured step: its events hold the latest launch of the graph once that has completed. A
  // launch still running when the next one is enqueued is never seen (the next one records the
  // same events again).
  if (m.graph_step && m.graph_step->closed) {
    TimedStep& t = *m.graph_step;
    const uint64_t graph = m.owner->graph_id(), launches = m.owner->graph_launches();
    if (graph == t.graph && launches > t.launches_read) {
      const cudaError_t q = cudaEventQuery(t.wait_end.get());
      if (q == cudaErrorNotReady) {
        cudaGetLastError();
      } else {
        if (q == cudaSuccess) got = t.read(comm_seconds, exposed_seconds) || got;
        else cudaGetLastError();
        t.launches_read = launches;
      }
    }
  }
  return got;
}

}  // namespace amp
