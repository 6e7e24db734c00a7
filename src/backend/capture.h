// Step capture (CUDA graphs): a backend that can record the device part of a step and replay it
// returns true from begin_capture(); the calls up to end_capture() are recorded, not run; replay()
// runs them. Capturing fails on any call that would synchronize with the host. The CPU backend
// cannot capture (begin_capture() is false: the caller runs the step eagerly).
#pragma once

namespace amp {

class StepCapture {
 public:
  virtual ~StepCapture() = default;
  // Whether this backend captures steps at all (begin_capture() may still refuse one).
  virtual bool can_capture() const { return false; }
  virtual bool begin_capture() { return false; }
  virtual void end_capture() {}
  virtual void replay() {}
  // Drops the captured step (its owner ends): a later replay() needs a new capture.
  virtual void release_capture() noexcept {}
};

}  // namespace amp
