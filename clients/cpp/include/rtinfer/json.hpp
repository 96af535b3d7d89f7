// A small JSON reader for rtinfer's own files (tokenizer.json, action_spec.json, the
// launcher's curve.json, tests/vectors/manifest.json): objects keep their key order.
// Throws std::runtime_error naming the offset on malformed text.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rtinfer::json {

struct Value {
    enum class Kind { Null, Bool, Number, String, Array, Object } kind = Kind::Null;
    bool b = false;
    double num = 0;
    std::string text;    // String; Number: its source text (exact integers)
    std::vector<Value> items;                        // Array
    std::vector<std::pair<std::string, Value>> obj;  // Object, in file order

    const Value* get(std::string_view key) const;
    const Value& at(std::string_view key) const;  // throws naming the key when absent
    bool is_integer() const;                      // a Number without '.', 'e' or 'E'
    long long integer() const;                    // exact; throws if not an integer
    unsigned long long uinteger() const;
};

Value parse(std::string_view text);
Value parse_file(const std::string& path);
std::string quote(std::string_view s);  // a JSON string literal

}  // namespace rtinfer::json
