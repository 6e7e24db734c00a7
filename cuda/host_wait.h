// Moved to src/cudart/ (temporary forwarding header, removed once nothing includes it).
#pragma once
#include "cudart/host_wait.h"
