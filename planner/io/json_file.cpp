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
#include "../json_fields.h"
#include "hf_config.h"

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

/// The largest input file read: far beyond any profile, cluster, plan or project Pipewright writes (the 64-stage
/// GPT-3 project is 70 KB, a 100,000-operator graph profile about 50 MB), so that /dev/zero or a disk image is
/// refused instead of read until memory runs out.
constexpr std::size_t kMaxJsonFileBytes = std::size_t {256} << 20;

std::string readText(const std::string& path)
{
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
        throw InputError(path, 0, "", "is a directory, not a file");
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw InputError(path, 0, "", std::string("cannot open: ") + std::strerror(errno));
    std::string text;
    char chunk[1 << 16];
    while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
        const std::size_t before = text.size();
        text.append(chunk, static_cast<std::size_t>(in.gcount()));
        // JSON text holds no control characters but tab, newline and carriage return (not even inside strings): one
        // is a binary file (or /dev/zero), refused at once and never echoed to the terminal.
        for (std::size_t i = before; i < text.size(); ++i) {
            const auto c = static_cast<unsigned char>(text[i]);
            if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f) {
                char hex[8];
                std::snprintf(hex, sizeof hex, "0x%02x", c);
                throw InputError(path, lineAt(text, i), "",
                    std::string("is not a JSON text file: byte ") + std::to_string(i + 1) + " is the control character "
                        + hex + " (a binary file?)");
            }
        }
        if (text.size() > kMaxJsonFileBytes)
            throw InputError(path, 0, "",
                "is larger than " + std::to_string(kMaxJsonFileBytes >> 20)
                    + " MiB: not a Pipewright JSON file (profiles, clusters, plans and projects are far smaller)");
    }
    if (in.bad())
        throw InputError(path, 0, "", std::string("cannot read: ") + std::strerror(errno));
    return text;
}

/// `text` with every byte that is not printable ASCII or part of valid UTF-8 written as \xNN: what a parser quotes
/// back from the input is safe to print.
std::string printable(std::string_view text)
{
    std::string out;
    for (std::size_t i = 0; i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        std::size_t length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
        bool valid = length > 0 && i + length <= text.size();
        for (std::size_t k = 1; valid && k < length; ++k)
            valid = (static_cast<unsigned char>(text[i + k]) >> 6) == 0x2;
        if (valid && (length > 1 || (c >= 0x20 && c != 0x7f))) {
            out.append(text.substr(i, length));
            i += length;
            continue;
        }
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02x", c);
        out += hex;
        ++i;
    }
    return out;
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
/// The pointer of the value holding byte `offset` of `text` (Scanner::pointerAt, defined below).
std::string pointerAtOffset(std::string_view text, std::size_t offset);

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
        std::string message = printable(stripExceptionTag(e.what()));
        // "parse error at line 3, column 5: syntax error ..." -> "syntax error ... (column 5)"
        if (auto colon = message.find(": "); message.rfind("parse error", 0) == 0 && colon != std::string::npos)
            message = message.substr(colon + 2);
        message += " (column " + std::to_string(at - lineStart + 1) + ")";
        throw InputError(path, line, "", message);
    } catch (const json::exception& e) {
        // A number too large for a double ("number overflow parsing '1e999'"): nlohmann gives no position, so the
        // number it quotes is found in the text, with its line and the field it is the value of.
        const std::string message = printable(stripExceptionTag(e.what()));
        const std::string what = stripExceptionTag(e.what());
        if (const auto open = what.find(" parsing '"); open != std::string::npos) {
            const auto begin = open + 10;
            const auto end = what.find('\'', begin);
            const std::string literal = end == std::string::npos ? "" : what.substr(begin, end - begin);
            for (std::size_t at = literal.empty() ? std::string::npos : text.find(literal); at != std::string::npos;
                 at = text.find(literal, at + 1)) {
                const auto boundary = [&](std::size_t i) {
                    return i >= text.size()
                        || std::string_view(",]} \t\r\n:[{").find(text[i]) != std::string_view::npos;
                };
                if ((at == 0 || boundary(at - 1)) && boundary(at + literal.size())) {
                    std::string field = pointerAtOffset(text, at);
                    throw InputError(path, lineAt(text, at), field.empty() ? "/" : field,
                        message + ": the number is out of range (a double holds up to about 1.8e308)");
                }
            }
        }
        throw InputError(path, 0, "", message);
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
    std::optional<DuplicateKey> firstDuplicateKey() { return walk(std::string_view::npos, nullptr); }

    /// The JSON pointer of the value that holds `offset` (the text need not be valid JSON: a number nlohmann would
    /// not take, e.g. 1e999), "" for the document itself.
    std::string pointerAt(std::size_t offset)
    {
        std::string pointer;
        walk(offset, &pointer);
        return pointer;
    }

private:
    /// Walks the text from m_pos: up to `stop` (then the pointer of the value there goes to `pointer`), or to its end
    /// returning the first duplicate key.
    std::optional<DuplicateKey> walk(std::size_t stop, std::string* pointer)
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
            if (m_pos >= stop) {
                if (pointer) {
                    for (const Frame& f : stack)
                        *pointer += "/" + (f.object ? escapedToken(f.current) : std::to_string(f.index));
                }
                return std::nullopt;
            }
            const char c = peek();
            if (c == '"') {
                Frame* top = stack.empty() ? nullptr : &stack.back();
                if (top && top->object && top->expectKey) {
                    std::string key = readString();
                    top->expectKey = false;
                    if (!top->add(key) && !pointer)
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

std::string pointerAtOffset(std::string_view text, std::size_t offset)
{
    return Scanner(text).pointerAt(offset);
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
    return loadFile<ModelProfile>(path, [](const json& j) {
        if (isHfConfig(j))
            fields::fail("/model_type",
                "this is a Hugging Face config.json, not a model profile: make its profile with `pipewright-cli "
                "profile transformer --hf-config FILE --seq S --microbatch B --device D` (in the app: File > Import "
                "profile)");
        return modelFromJson(j);
    });
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
