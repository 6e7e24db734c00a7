// Reading checkpoint headers (train/checkpoint_io.cpp and checkpoint_apply.cpp): typed fields
// whose wrong type is a Checkpoint error naming the field, and the writer's config values.
#pragma once

#include <string>
#include <type_traits>

#include "core/error.h"
#include "train/checkpoint.h"

namespace amp::checkpoint_fields {

// The value the writer's config had for key (its "config" map), "" when the header does not say.
inline std::string config_then(const Checkpoint& ck, const std::string& key) {
  const auto cfg = ck.header.find("config");
  if (cfg == ck.header.end() || !cfg->is_object()) return "";
  const auto it = cfg->find(key);
  return it != cfg->end() && it->is_string() ? it->get<std::string>() : "";
}

// A header field read here: missing -> fallback; present with the wrong type -> a Checkpoint error
// naming it (never a json exception).
template <typename T>
T header_field(const Checkpoint& ck, const char* key, T fallback) {
  const auto it = ck.header.find(key);
  if (it == ck.header.end()) return fallback;
  bool ok = false;
  if constexpr (std::is_same_v<T, std::string>) ok = it->is_string();
  else if constexpr (std::is_integral_v<T>) ok = it->is_number_integer();
  else ok = it->is_number();
  if (!ok)
    throw Error(ErrorKind::Checkpoint, strcat("checkpoint error: ", ck.path, ": header field \"", key,
                                              "\" has the wrong type (", it->type_name(), ")"));
  return it->get<T>();
}

}  // namespace amp::checkpoint_fields
