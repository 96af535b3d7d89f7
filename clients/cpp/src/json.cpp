#include "rtinfer/json.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace rtinfer::json {

namespace {

class Reader {
  public:
    explicit Reader(std::string_view t) : t_(t) {}

    Value document() {
        Value v = value(0);
        ws();
        if (i_ != t_.size()) fail("trailing text");
        return v;
    }

  private:
    std::string_view t_;
    size_t i_ = 0;

    [[noreturn]] void fail(const char* why) {
        throw std::runtime_error(std::string("JSON: ") + why + " at offset " + std::to_string(i_));
    }
    void ws() {
        while (i_ < t_.size() && (t_[i_] == ' ' || t_[i_] == '\n' || t_[i_] == '\r' || t_[i_] == '\t')) ++i_;
    }
    bool eat(char c) {
        ws();
        if (i_ < t_.size() && t_[i_] == c) { ++i_; return true; }
        return false;
    }
    void expect(char c) {
        if (!eat(c)) fail("unexpected character");
    }
    bool word(std::string_view w) {
        if (t_.substr(i_, w.size()) != w) return false;
        i_ += w.size();
        return true;
    }

    Value value(int depth) {
        if (depth > 64) fail("nesting too deep");
        ws();
        if (i_ >= t_.size()) fail("unexpected end");
        Value v;
        char c = t_[i_];
        if (c == '{') {
            ++i_;
            v.kind = Value::Kind::Object;
            if (eat('}')) return v;
            do {
                ws();
                std::string key = string();
                expect(':');
                v.obj.emplace_back(std::move(key), value(depth + 1));
            } while (eat(','));
            expect('}');
        } else if (c == '[') {
            ++i_;
            v.kind = Value::Kind::Array;
            if (eat(']')) return v;
            do v.items.push_back(value(depth + 1));
            while (eat(','));
            expect(']');
        } else if (c == '"') {
            v.kind = Value::Kind::String;
            v.text = string();
        } else if (word("true") || word("false")) {
            v.kind = Value::Kind::Bool;
            v.b = t_[i_ - 1] == 'e' && t_[i_ - 2] == 'u';
        } else if (word("null")) {
            v.kind = Value::Kind::Null;
        } else {
            size_t start = i_;
            while (i_ < t_.size() && std::string_view("+-0123456789.eE").find(t_[i_]) != std::string_view::npos) ++i_;
            if (start == i_) fail("unexpected character");
            v.kind = Value::Kind::Number;
            v.text = std::string(t_.substr(start, i_ - start));
            char* end = nullptr;
            v.num = std::strtod(v.text.c_str(), &end);
            if (end != v.text.c_str() + v.text.size()) fail("bad number");
        }
        return v;
    }

    static void utf8(std::string& out, unsigned cp) {
        if (cp < 0x80) out.push_back(char(cp));
        else if (cp < 0x800) { out.push_back(char(0xC0 | (cp >> 6))); out.push_back(char(0x80 | (cp & 0x3F))); }
        else if (cp < 0x10000) {
            out.push_back(char(0xE0 | (cp >> 12)));
            out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
            out.push_back(char(0x80 | (cp & 0x3F)));
        } else {
            out.push_back(char(0xF0 | (cp >> 18)));
            out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
            out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
            out.push_back(char(0x80 | (cp & 0x3F)));
        }
    }

    unsigned hex4() {
        if (i_ + 4 > t_.size()) fail("short \\u escape");
        unsigned cp = std::stoul(std::string(t_.substr(i_, 4)), nullptr, 16);
        i_ += 4;
        return cp;
    }

    std::string string() {
        if (i_ >= t_.size() || t_[i_] != '"') fail("expected a string");
        ++i_;
        std::string out;
        while (true) {
            if (i_ >= t_.size()) fail("unterminated string");
            char c = t_[i_++];
            if (c == '"') return out;
            if (c != '\\') { out.push_back(c); continue; }
            if (i_ >= t_.size()) fail("unterminated string");
            char e = t_[i_++];
            switch (e) {
                case 'n': out.push_back('\n'); break;
                case 't': out.push_back('\t'); break;
                case 'r': out.push_back('\r'); break;
                case 'b': out.push_back('\b'); break;
                case 'f': out.push_back('\f'); break;
                case 'u': {
                    unsigned cp = hex4();
                    if (cp >= 0xD800 && cp < 0xDC00 && t_.substr(i_, 2) == "\\u") {
                        i_ += 2;
                        unsigned lo = hex4();
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    }
                    utf8(out, cp);
                    break;
                }
                default: out.push_back(e);  // \" \\ \/
            }
        }
    }
};

}  // namespace

const Value* Value::get(std::string_view key) const {
    for (const auto& kv : obj)
        if (kv.first == key) return &kv.second;
    return nullptr;
}

const Value& Value::at(std::string_view key) const {
    const Value* v = get(key);
    if (!v) throw std::runtime_error("JSON: missing key \"" + std::string(key) + "\"");
    return *v;
}

bool Value::is_integer() const {
    return kind == Kind::Number && text.find_first_of(".eE") == std::string::npos;
}

long long Value::integer() const {
    if (!is_integer()) throw std::runtime_error("JSON: " + text + " is not an integer");
    return std::stoll(text);
}

unsigned long long Value::uinteger() const {
    if (!is_integer() || text[0] == '-') throw std::runtime_error("JSON: " + text + " is not a non-negative integer");
    return std::stoull(text);
}

Value parse(std::string_view text) { return Reader(text).document(); }

Value parse_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    try {
        return parse(ss.str());
    } catch (const std::runtime_error& e) {
        throw std::runtime_error(path + ": " + e.what());
    }
}

std::string quote(std::string_view s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') { out.push_back('\\'); out.push_back(char(c)); }
        else if (c < 0x20) {
            char buf[8];
            snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else out.push_back(char(c));
    }
    return out + "\"";
}

}  // namespace rtinfer::json
