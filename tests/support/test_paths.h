// The source tree's root and its tests/fixtures folder, for tests, benches and fuzz seeds.
//
// Why functions and not string literals compiled into every test: an absolute path on a test's command line
// (-DMMSERVE_FIXTURES_DIR="/work/main/...") makes its ccache key differ in every clone, and CI builds a fresh
// clone in another folder, so every test source missed the cache there (13 of a cold build's ~28 minutes).
// The two paths are compiled into test_paths.cpp alone; the macros keep the old names so tests read the same.
// $MMSERVE_SOURCE_DIR overrides the compiled root (a build carried to another machine, e.g. the GPU host).
#pragma once

#include <string>

namespace mmserve::test {

const std::string& source_dir();    // the repository root, no trailing '/'
const std::string& fixtures_dir();  // source_dir() + "/tests/fixtures"

}  // namespace mmserve::test

#define MMSERVE_SOURCE_DIR (::mmserve::test::source_dir())
#define MMSERVE_FIXTURES_DIR (::mmserve::test::fixtures_dir())
