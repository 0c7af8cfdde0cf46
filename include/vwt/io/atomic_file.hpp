// Atomic file replacement: write to a temporary file beside the target, fsync, rename into place,
// so a crash mid-write leaves either the old file or the new one, never a torn one.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>

#include "../error.hpp"

namespace vwt::io {

namespace detail {
inline void write_all(int fd, const char* data, std::size_t size, const std::string& path) {
    while (size > 0) {
        const ssize_t n = ::write(fd, data, size);
        if (n < 0) {
            if (errno == EINTR) continue;
            vwt::detail::fail("cannot write '", path, "': ", std::strerror(errno));
        }
        data += n;
        size -= static_cast<std::size_t>(n);
    }
}
}  // namespace detail

// Writes the concatenation of `pieces` to `path` atomically.
inline void write_file_atomic(const std::filesystem::path& path, std::span<const std::string_view> pieces) {
    const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
    std::random_device entropy;
    // Built with append rather than operator+ (GCC 12 warns falsely on "." + std::string).
    std::string tmp_name(".");
    tmp_name.append(path.filename().string()).append(".tmp").append(std::to_string(entropy()));
    const std::string tmp = (dir / tmp_name).string();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) vwt::detail::fail("cannot create '", tmp, "': ", std::strerror(errno));
    try {
        for (auto piece : pieces) detail::write_all(fd, piece.data(), piece.size(), tmp);
        if (::fsync(fd) != 0) vwt::detail::fail("cannot fsync '", tmp, "': ", std::strerror(errno));
    } catch (...) {
        ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    if (::close(fd) != 0) {
        ::unlink(tmp.c_str());
        vwt::detail::fail("cannot close '", tmp, "': ", std::strerror(errno));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        vwt::detail::fail("cannot rename '", tmp, "' to '", path.string(), "': ", std::strerror(err));
    }
    // Make the rename itself durable.
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

inline void write_file_atomic(const std::filesystem::path& path, std::string_view contents) {
    const std::string_view pieces[] = {contents};
    write_file_atomic(path, pieces);
}

// Puts the complete directory `from` in the place of `to`: atomically where Linux can exchange
// two names (renameat2 RENAME_EXCHANGE), so that `to` names the old directory or the new one at
// every instant; elsewhere by moving the old one aside first. The old directory is then removed.
inline void replace_directory(const std::filesystem::path& from, const std::filesystem::path& to) {
    namespace fs = std::filesystem;
    const auto fail_rename = [&](const fs::path& a, const fs::path& b, int err) {
        vwt::detail::fail("cannot move '", a.string(), "' to '", b.string(), "': ", std::strerror(err));
    };
    if (!fs::exists(to)) {
        if (::rename(from.c_str(), to.c_str()) != 0) fail_rename(from, to, errno);
    } else {
#if defined(__linux__) && defined(RENAME_EXCHANGE)
        if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE) != 0) fail_rename(from, to, errno);
        fs::remove_all(from);  // now the old directory
#else
        std::string aside = to.string();
        aside.append(".old");
        fs::remove_all(aside);
        if (::rename(to.c_str(), aside.c_str()) != 0) fail_rename(to, aside, errno);
        if (::rename(from.c_str(), to.c_str()) != 0) fail_rename(from, to, errno);
        fs::remove_all(aside);
#endif
    }
    const auto dir = to.has_parent_path() ? to.parent_path() : fs::path(".");
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

}  // namespace vwt::io
