// CSV loader: numeric columns (cells may be quoted, RFC 4180), optional header, one target column
// chosen by name or index.
// Owns load_csv(); errors are Data errors naming file:line (and :column for a bad cell).
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cmath>
#include <deque>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/files.h"
#include "core/format.h"
#include "data/dataset.h"

namespace amp {
namespace {

template <typename... Args>
[[noreturn]] void data_error(const std::string& path, const Args&... args) {
  throw Error(ErrorKind::Data, strcat("data error: ", path, ":", args...));
}

std::string_view trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && (s[b] == ' ' || s[b] == '\t')) ++b;
  while (e > b && (s[e - 1] == ' ' || s[e - 1] == '\t')) --e;
  return s.substr(b, e - b);
}

// A line's cells, trimmed of spaces and tabs. A cell may be quoted as RFC 4180 says ("a,b" is
// one cell; "" inside quotes is one quote): the cell is what lies between its quotes, and its
// unescaped text is kept in `unescaped` where it had a doubled quote. A quoted cell must close on
// its line (line breaks inside quotes are not supported) and be followed by its comma or the line's
// end; anything else is an error naming file:line:column.
std::vector<std::string_view> split_cells(std::string_view line, const std::string& path, size_t line_no,
                                          std::deque<std::string>& unescaped) {
  std::vector<std::string_view> cells;
  size_t start = 0;
  for (;;) {
    size_t b = start;
    while (b < line.size() && (line[b] == ' ' || line[b] == '\t')) ++b;
    if (b < line.size() && line[b] == '"') {
      size_t q = b + 1;
      bool doubled = false;
      for (;; ++q) {
        q = line.find('"', q);
        if (q == std::string_view::npos)
          data_error(path, line_no, ":", cells.size() + 1,
                     ": a quoted cell is not closed on its line (cells spanning lines are not supported)");
        if (q + 1 < line.size() && line[q + 1] == '"') {
          doubled = true;
          ++q;
          continue;
        }
        break;
      }
      std::string_view cell = line.substr(b + 1, q - b - 1);
      if (doubled) {
        std::string text;
        for (size_t i = 0; i < cell.size(); ++i) {
          text += cell[i];
          if (cell[i] == '"') ++i;  // the second quote of the pair
        }
        cell = unescaped.emplace_back(std::move(text));
      }
      cells.push_back(cell);
      size_t e = q + 1;
      while (e < line.size() && (line[e] == ' ' || line[e] == '\t')) ++e;
      if (e == line.size()) break;
      if (line[e] != ',')
        data_error(path, line_no, ":", cells.size(), ": expected a comma or the line's end after a quoted cell, got \"",
                   printable(line.substr(e, 20)), "\"");
      start = e + 1;
      continue;
    }
    const size_t comma = line.find(',', start);
    cells.push_back(trim(line.substr(start, comma == std::string_view::npos ? comma : comma - start)));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return cells;
}

enum class ParseResult { Ok, NotANumber, NotFinite };

// The whole (trimmed) cell must be a number: from_chars is locale-independent and reports
// where it stopped, so "1.5abc" or "1 2" are rejected instead of silently truncated.
ParseResult parse_number(std::string_view cell, double& out) {
  const char* b = cell.data();
  const char* e = b + cell.size();
  if (b != e && *b == '+') {
    ++b;  // from_chars takes no '+'; "+-1" must still fail
    if (b != e && (*b == '-' || *b == '+')) return ParseResult::NotANumber;
  }
  if (b == e) return ParseResult::NotANumber;
  const auto r = std::from_chars(b, e, out);
  if (r.ptr != e) return ParseResult::NotANumber;
  if (r.ec == std::errc::result_out_of_range) return ParseResult::NotFinite;
  if (r.ec != std::errc()) return ParseResult::NotANumber;
  // Features and targets are FP32: a finite double beyond FP32's range would become inf.
  return std::isfinite(out) && std::fabs(out) <= double(std::numeric_limits<float>::max()) ? ParseResult::Ok
                                                                                            : ParseResult::NotFinite;
}

bool parse_index(const std::string& s, size_t& out) {
  if (s.empty()) return false;
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

std::string join_names(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? ", \"" : "\"") + names[i] + "\"";
  return s;
}

// The target column from the option: a header name first (a column may be called "3"),
// then a 0-based index, "" = the last column.
size_t resolve_target(const std::string& path, const CsvOptions& opt,
                      const std::vector<std::string>& names, size_t n_cols) {
  if (opt.target.empty()) return n_cols - 1;
  if (opt.header) {
    size_t found = n_cols, matches = 0;
    for (size_t i = 0; i < names.size(); ++i)
      if (names[i] == opt.target) {
        if (matches++ == 0) found = i;
      }
    if (matches > 1)
      data_error(path, " the target column name \"", opt.target, "\" appears ", matches,
                 " times in the header");
    if (matches == 1) return found;
  }
  size_t index = 0;
  if (parse_index(opt.target, index)) {
    if (index >= n_cols)
      data_error(path, " target column index ", index, " is out of range: the file has ", n_cols,
                 " columns (0..", n_cols - 1, ")");
    return index;
  }
  if (opt.header)
    data_error(path, " no column named \"", opt.target, "\"; available: ", join_names(names));
  data_error(path, " target \"", opt.target,
             "\" is not a column index, and a column name needs a header (the file has none)");
}

}  // namespace

Dataset load_csv(const std::string& path, const CsvOptions& opt) {
  if (opt.n_classes < 0)
    data_error(path, " the number of classes must be >= 0 (0 = infer), got ", opt.n_classes);
  if (const std::string problem = regular_file_problem(path); !problem.empty()) data_error(path, " ", problem);
  std::ifstream in(path, std::ios::binary);
  if (!in) data_error(path, " cannot open: ", std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) data_error(path, " read error: ", std::strerror(errno));
  std::string text = ss.str();
  // A UTF-8 byte order mark (spreadsheet exports) is not part of the first column's name.
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);

  Dataset d;
  d.source = path;
  d.task = opt.task;
  std::vector<std::string> names;
  size_t n_cols = 0, cols_line = 0, target = 0;
  bool have_header = false;
  int64_t max_label = -1;

  size_t line_no = 0;
  std::deque<std::string> unescaped;  // the current line's cells that had doubled quotes
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const std::string_view content = trim(line);
    if (content.empty() || content.front() == '#') continue;

    unescaped.clear();
    const std::vector<std::string_view> cells = split_cells(line, path, line_no, unescaped);
    if (n_cols == 0) {
      // The first line that is not blank fixes the column count, header or not.
      n_cols = cells.size();
      cols_line = line_no;
      if (n_cols < 2)
        data_error(path, line_no, ": ", n_cols,
                   " column; a data set needs at least 2 (features and a target)");
      if (opt.header) {
        // A header of numbers is a data row: reading it as names would silently lose a sample.
        size_t numeric = 0;
        double ignored = 0;
        for (std::string_view c : cells) {
          names.emplace_back(c);
          if (parse_number(c, ignored) != ParseResult::NotANumber) ++numeric;
        }
        if (numeric == n_cols)
          data_error(path, line_no, ": data.csv_header is true but the first line holds only numbers (\"",
                     std::string(content.substr(0, 60)), content.size() > 60 ? "...\"" : "\"",
                     "); set data.csv_header: false if the file has no header");
      }
      target = resolve_target(path, opt, names, n_cols);
      d.n_features = n_cols - 1;
      if (opt.header) {
        have_header = true;
        continue;
      }
    }
    if (cells.size() != n_cols)
      data_error(path, line_no, ": row has ", cells.size(), " columns, expected ", n_cols,
                 " (from line ", cols_line, ")");

    for (size_t c = 0; c < n_cols; ++c) {
      double v = 0.0;
      const ParseResult r = parse_number(cells[c], v);
      if (r == ParseResult::NotANumber)
        data_error(path, line_no, ":", c + 1, ": expected a number, got \"", printable(cells[c]), "\"");
      if (r == ParseResult::NotFinite)
        data_error(path, line_no, ":", c + 1, ": expected a finite number within FP32's range (|x| <= 3.4e38), got \"",
                   printable(cells[c]), "\"");
      if (c != target) {
        d.x.push_back(static_cast<float>(v));
      } else if (opt.task == Task::Regression) {
        d.y.push_back(static_cast<float>(v));
      } else {
        if (v < 0 || v != std::floor(v) || v >= double(INT_MAX))
          data_error(path, line_no, ":", c + 1,
                     ": class label must be a non-negative integer, got \"", printable(cells[c]), "\"");
        const auto label = static_cast<int64_t>(v);
        if (opt.n_classes > 0 && label >= opt.n_classes)
          data_error(path, line_no, ":", c + 1, ": label ", label, " is out of range [0, ",
                     opt.n_classes, ")");
        max_label = std::max(max_label, label);
        d.labels.push_back(static_cast<int32_t>(label));
      }
    }
    ++d.n;
  }

  if (d.n == 0)
    data_error(path, " no data rows",
               have_header ? " (only a header)" : (line_no == 0 ? " (empty file)" : ""));
  if (opt.task == Task::Regression) {
    d.n_targets = 1;
  } else {
    if (opt.n_classes == 0 && max_label >= kMaxClasses)
      data_error(path, " the largest label ", max_label, " would make ", max_label + 1, " classes; at most ",
                 kMaxClasses, " are supported");
    d.n_classes = opt.n_classes > 0 ? opt.n_classes : static_cast<int>(max_label + 1);
  }
  return d;
}

}  // namespace amp
