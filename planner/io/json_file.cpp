// SPDX-License-Identifier: MIT
// JSON files on disk: nlohmann parses, a small position scanner maps JSON pointers back to source lines.
#include "json_file.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <unordered_set>
#include <vector>

#include "../analysis/advisor.h"
#include "../errors.h"

namespace pw::planner {

using nlohmann::json;

namespace {

int lineAt(std::string_view text, std::size_t offset)
{
    offset = std::min(offset, text.size());
    int line = 1;
    for (std::size_t i = 0; i < offset; ++i)
        if (text[i] == '\n')
            ++line;
    return line;
}

std::string readText(const std::string& path)
{
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw InputError(path, 0, "", "is a directory, not a file");
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw InputError(path, 0, "", std::string("cannot open: ") + std::strerror(errno));
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (in.bad())
        throw InputError(path, 0, "", std::string("cannot read: ") + std::strerror(errno));
    return buffer.str();
}

/// nlohmann's what() is "[json.exception.<kind>.<id>] <message>"; the bracketed tag is noise for users.
std::string stripExceptionTag(const char* what)
{
    std::string_view s(what);
    if (!s.empty() && s.front() == '[') {
        auto close = s.find("] ");
        if (close != std::string_view::npos)
            s.remove_prefix(close + 2);
    }
    return std::string(s);
}

/// A key given twice in one object: nlohmann keeps the last one silently.
struct DuplicateKey
{
    std::string pointer; ///< e.g. "/nodes/0/count"
    std::string key;
    int line = 0; ///< of the repetition
};
/// The first duplicate key of valid JSON text (defined with the scanner below).
std::optional<DuplicateKey> findDuplicateKey(std::string_view text);

json parseText(const std::string& path, const std::string& text)
{
    try {
        json j = json::parse(text);
        if (auto dup = findDuplicateKey(text))
            throw InputError(path, dup->line, dup->pointer,
                "duplicate key '" + dup->key + "': it appears more than once in the same object");
        return j;
    } catch (const json::parse_error& e) {
        // e.byte is the 1-based index of the last character read; the error sits on that character.
        std::size_t at = std::min<std::size_t>(e.byte > 0 ? e.byte - 1 : 0, text.size());
        if (at == text.size()) {
            // Unexpected end of input: report the last line that has content, not the empty one after it.
            while (at > 0 && std::isspace(static_cast<unsigned char>(text[at - 1])))
                --at;
        }
        int line = lineAt(text, at);
        std::size_t lineStart = at;
        while (lineStart > 0 && text[lineStart - 1] != '\n')
            --lineStart;
        std::string message = stripExceptionTag(e.what());
        // "parse error at line 3, column 5: syntax error ..." -> "syntax error ... (column 5)"
        if (auto colon = message.find(": "); message.rfind("parse error", 0) == 0 && colon != std::string::npos)
            message = message.substr(colon + 2);
        message += " (column " + std::to_string(at - lineStart + 1) + ")";
        throw InputError(path, line, "", message);
    } catch (const json::exception& e) {
        // e.g. a number too large for a double; nlohmann gives no position for these.
        throw InputError(path, 0, "", stripExceptionTag(e.what()));
    }
}

// ---- position scanner ---------------------------------------------------------------------------------
// Walks already-valid JSON (nlohmann parsed it first) only far enough to find where a value starts.

class Scanner
{
public:
    explicit Scanner(std::string_view text)
        : m_text(text)
    {
        if (m_text.substr(0, 3) == "\xEF\xBB\xBF")
            m_pos = 3; // nlohmann accepts a UTF-8 byte-order mark
    }

    /// Offset where the value at `tokens` starts, or nullopt.
    std::optional<std::size_t> locate(const std::vector<std::string>& tokens)
    {
        skipSpace();
        for (const auto& token : tokens) {
            if (!atEnd() && peek() == '{') {
                if (!enterMember(token))
                    return std::nullopt;
            } else if (!atEnd() && peek() == '[') {
                if (!enterElement(token))
                    return std::nullopt;
            } else {
                return std::nullopt;
            }
        }
        return atEnd() ? std::nullopt : std::optional<std::size_t>(m_pos);
    }

    /// Walks the whole (valid) text once and returns the first key given twice in one object.
    std::optional<DuplicateKey> firstDuplicateKey()
    {
        struct Frame
        {
            bool object = false;
            bool expectKey = false; ///< objects: the next string is a key
            std::size_t index = 0; ///< arrays: the element being read
            std::string current; ///< objects: the member being read
            std::vector<std::string> few; ///< objects: keys so far, searched linearly while few ...
            std::unordered_set<std::string> many; ///< ... and hashed beyond that

            bool add(const std::string& key) ///< false when `key` was seen before in this object
            {
                constexpr std::size_t kFew = 16;
                if (many.empty()) {
                    if (std::find(few.begin(), few.end(), key) != few.end())
                        return false;
                    few.push_back(key);
                    if (few.size() > kFew)
                        many.insert(few.begin(), few.end());
                    return true;
                }
                return many.insert(key).second;
            }
        };
        std::vector<Frame> stack;
        int line = 1;
        while (!atEnd()) {
            const char c = peek();
            if (c == '"') {
                Frame* top = stack.empty() ? nullptr : &stack.back();
                if (top && top->object && top->expectKey) {
                    std::string key = readString();
                    top->expectKey = false;
                    if (!top->add(key))
                        return DuplicateKey {pointerOf(stack) + "/" + escapedToken(key), key, line};
                    top->current = std::move(key);
                } else {
                    skipString(line);
                }
                continue;
            }
            ++m_pos;
            if (c == '\n') {
                ++line;
            } else if (c == '{' || c == '[') {
                stack.emplace_back();
                stack.back().object = c == '{';
                stack.back().expectKey = c == '{';
            } else if (c == '}' || c == ']') {
                if (!stack.empty())
                    stack.pop_back();
            } else if (c == ',' && !stack.empty()) {
                if (stack.back().object)
                    stack.back().expectKey = true;
                else
                    ++stack.back().index;
            }
        }
        return std::nullopt;
    }

private:
    /// Skips a string literal at m_pos (on its opening quote), counting the (escaped) newlines it holds.
    void skipString(int& line)
    {
        ++m_pos;
        while (!atEnd() && peek() != '"') {
            if (peek() == '\\')
                ++m_pos;
            else if (peek() == '\n')
                ++line; // not valid JSON, but keeps lines right should a parser accept it
            ++m_pos;
        }
        ++m_pos;
    }

    template <typename Frames> static std::string pointerOf(const Frames& stack)
    {
        std::string out;
        for (std::size_t i = 0; i + 1 < stack.size(); ++i)
            out += "/" + (stack[i].object ? escapedToken(stack[i].current) : std::to_string(stack[i].index));
        return out;
    }

    static std::string escapedToken(const std::string& key)
    {
        std::string out;
        for (char c : key)
            out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
        return out;
    }

    bool atEnd() const { return m_pos >= m_text.size(); }
    char peek() const { return m_text[m_pos]; }

    void skipSpace()
    {
        while (!atEnd() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r'))
            ++m_pos;
    }

    bool expect(char c)
    {
        skipSpace();
        if (atEnd() || peek() != c)
            return false;
        ++m_pos;
        skipSpace();
        return true;
    }

    static void appendUtf8(std::string& out, unsigned cp)
    {
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else if (cp < 0x800) {
            out += static_cast<char>(0xC0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out += static_cast<char>(0xE0 | (cp >> 12));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        } else {
            out += static_cast<char>(0xF0 | (cp >> 18));
            out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
            out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            out += static_cast<char>(0x80 | (cp & 0x3F));
        }
    }

    unsigned hex4()
    {
        unsigned v = 0;
        for (int i = 0; i < 4 && !atEnd(); ++i, ++m_pos) {
            char c = peek();
            v <<= 4;
            if (c >= '0' && c <= '9')
                v |= static_cast<unsigned>(c - '0');
            else if (c >= 'a' && c <= 'f')
                v |= static_cast<unsigned>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F')
                v |= static_cast<unsigned>(c - 'A' + 10);
        }
        return v;
    }

    /// Reads a string literal at m_pos (on the opening quote) and returns its decoded value.
    std::string readString()
    {
        std::string out;
        ++m_pos; // opening quote
        while (!atEnd() && peek() != '"') {
            char c = m_text[m_pos++];
            if (c != '\\' || atEnd()) {
                out += c;
                continue;
            }
            char e = m_text[m_pos++];
            switch (e) {
            case 'b':
                out += '\b';
                break;
            case 'f':
                out += '\f';
                break;
            case 'n':
                out += '\n';
                break;
            case 'r':
                out += '\r';
                break;
            case 't':
                out += '\t';
                break;
            case 'u': {
                unsigned cp = hex4();
                if (cp >= 0xD800 && cp < 0xDC00 && m_text.substr(m_pos, 2) == "\\u") {
                    m_pos += 2;
                    unsigned low = hex4();
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                }
                appendUtf8(out, cp);
                break;
            }
            default:
                out += e;
                break; // \" \\ \/
            }
        }
        ++m_pos; // closing quote
        return out;
    }

    /// Skips one value of any kind starting at m_pos.
    void skipValue()
    {
        if (atEnd())
            return;
        if (peek() == '"') {
            readString();
            return;
        }
        if (peek() == '{' || peek() == '[') {
            int depth = 0;
            while (!atEnd()) {
                char c = peek();
                if (c == '"') {
                    readString();
                    continue;
                }
                ++m_pos;
                if (c == '{' || c == '[')
                    ++depth;
                else if ((c == '}' || c == ']') && --depth == 0)
                    return;
            }
            return;
        }
        while (!atEnd() && std::string_view(",]} \t\r\n").find(peek()) == std::string_view::npos)
            ++m_pos; // number, true, false, null
    }

    /// On '{': moves to the value of member `key` (the last one, as nlohmann keeps the last duplicate).
    bool enterMember(const std::string& key)
    {
        ++m_pos;
        skipSpace();
        std::optional<std::size_t> found;
        while (!atEnd() && peek() == '"') {
            bool match = readString() == key;
            if (!expect(':'))
                return false;
            if (match)
                found = m_pos;
            skipValue();
            if (!expect(','))
                break;
        }
        if (!found)
            return false;
        m_pos = *found;
        return true;
    }

    /// On '[': moves to element `token` (a decimal index without leading zeros).
    bool enterElement(const std::string& token)
    {
        if (token.empty() || token.size() > 9 || (token.size() > 1 && token[0] == '0'))
            return false;
        long index = 0;
        for (char c : token) {
            if (c < '0' || c > '9')
                return false;
            index = index * 10 + (c - '0');
        }
        ++m_pos;
        skipSpace();
        if (!atEnd() && peek() == ']')
            return false;
        for (long i = 0; i < index; ++i) {
            skipValue();
            if (!expect(','))
                return false;
        }
        return !atEnd();
    }

    std::string_view m_text;
    std::size_t m_pos = 0;
};

std::optional<DuplicateKey> findDuplicateKey(std::string_view text)
{
    return Scanner(text).firstDuplicateKey();
}

/// RFC 6901 tokens of a pointer ("~1" is '/', "~0" is '~'); nullopt when it does not start with '/'.
std::optional<std::vector<std::string>> pointerTokens(std::string_view pointer)
{
    std::vector<std::string> tokens;
    if (pointer.empty())
        return tokens;
    if (pointer.front() != '/')
        return std::nullopt;
    std::string current;
    for (std::size_t i = 1; i <= pointer.size(); ++i) {
        if (i == pointer.size() || pointer[i] == '/') {
            tokens.push_back(std::move(current));
            current.clear();
        } else if (pointer[i] == '~' && i + 1 < pointer.size() && (pointer[i + 1] == '0' || pointer[i + 1] == '1')) {
            current += pointer[++i] == '0' ? '~' : '/';
        } else {
            current += pointer[i];
        }
    }
    return tokens;
}

/// Line of the value at `pointer`, or of its closest existing ancestor (a missing field is reported on
/// the object that lacks it). The planner uses "/" for the document itself.
int lineOfNearest(std::string_view text, const std::string& pointer)
{
    auto tokens = pointerTokens(pointer == "/" ? std::string_view() : std::string_view(pointer));
    if (!tokens)
        return 0;
    while (true) {
        Scanner scanner(text);
        if (auto at = scanner.locate(*tokens))
            return lineAt(text, *at);
        if (tokens->empty())
            return 0;
        tokens->pop_back();
    }
}

template <typename T, typename FromJson> T loadFile(const std::string& path, FromJson fromJson)
{
    const std::string text = readText(path);
    const json j = parseText(path, text);
    try {
        return fromJson(j);
    } catch (const InputError& e) {
        int line = e.line() > 0 ? e.line() : lineOfNearest(text, e.field());
        throw InputError(path, line, e.field(), e.message());
    } catch (const json::exception& e) {
        // Readers that call get<T>() directly surface nlohmann's type errors; they carry no location.
        throw InputError(path, 0, "", stripExceptionTag(e.what()));
    }
}

} // namespace

json readJsonFile(const std::string& path)
{
    return parseText(path, readText(path));
}

void writeJsonFile(const std::string& path, const json& j, int indent)
{
    std::string text;
    try {
        text = j.dump(indent) + "\n";
    } catch (const json::exception& e) {
        throw InputError(path, 0, "", "cannot serialize: " + stripExceptionTag(e.what()));
    }
    // Serialize first so that an error cannot leave a half-written file behind.
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out)
        throw InputError(path, 0, "", std::string("cannot write: ") + std::strerror(errno));
    out << text;
    out.flush();
    if (!out)
        throw InputError(path, 0, "", std::string("cannot write: ") + std::strerror(errno));
}

int lineOfJsonPointer(std::string_view text, std::string_view pointer)
{
    auto tokens = pointerTokens(pointer);
    if (!tokens)
        return 0;
    Scanner scanner(text);
    auto at = scanner.locate(*tokens);
    return at ? lineAt(text, *at) : 0;
}

void convertJsonFile(const std::string& path, const std::function<void(const json&)>& convert)
{
    loadFile<bool>(path, [&](const json& j) {
        convert(j);
        return true;
    });
}

ModelProfile loadModel(const std::string& path)
{
    return loadFile<ModelProfile>(path, modelFromJson);
}

Cluster loadCluster(const std::string& path)
{
    return loadFile<Cluster>(path, clusterFromJson);
}

Plan loadPlan(const std::string& path)
{
    return loadFile<Plan>(path, planFromJson);
}

Market loadMarket(const std::string& path)
{
    return loadFile<Market>(path, marketFromJson);
}

} // namespace pw::planner
