// A policy's tokenizer config and action spec, and their content hash (docs/policies.md
// section 2): the first 16 hex digits of sha256 over canonical msgpack bytes (map keys
// sorted by UTF-8 bytes, shortest ints, every limit as float64, lists as arrays).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "rtinfer/json.hpp"

namespace rtinfer {

struct TokenizerConfig {
    std::vector<double> low, high;
    uint64_t bins = 256;
    uint64_t horizon = 4;
    std::vector<std::string> names{"x", "y", "z", "suction"};
    uint64_t period_ns = 50000000;

    size_t dim() const { return names.size(); }
    std::string canonical_bytes() const;
    std::string hash() const;
    // From tokenizer.json's data; a "hash" entry must match (an edited file is refused).
    static TokenizerConfig from_json(const json::Value& v);
};

struct ActionSpec {
    std::vector<std::string> names, units;
    std::vector<double> low, high;
    uint64_t horizon = 4, period_ns = 50000000, start_ns = 50000000;
    std::optional<uint64_t> max_committed;  // optional: hashed only when present

    size_t dim() const { return names.size(); }
    std::string canonical_bytes() const;
    std::string hash() const;
    static ActionSpec from_json(const json::Value& v);  // action_spec.json
};

std::string sha256_hex(const std::string& data);

}  // namespace rtinfer
