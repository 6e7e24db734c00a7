#include "train/run.h"

#include "train/trainer.h"

namespace amp {

int run(const Config& cfg, Communicator& world) {
  Trainer trainer(cfg, world);
  return trainer.run();
}

}  // namespace amp
