# SPDX-License-Identifier: MIT
# Precompiled headers (docs/build.md, "Build time"). Half of a test or widget file's compile time was parsing the
# same headers again (GCC's -ftime-report on the 2-core VM: "phase parsing" 50 % of tests/planner/test_zero.cpp, 55 %
# of ui/widgets/partition_panel.cpp): Catch2's single header, nlohmann/json, Qt's widgets, the standard library. Each
# target that has many files parses them once into a PCH; its files start from it. Files still include what they
# use (a build with -DPW_PRECOMPILED_HEADERS=OFF compiles them alone: the asan preset does).
option(PW_PRECOMPILED_HEADERS "Precompile the headers most files include (standard library, JSON, Catch2, Qt)" ON)

set(PW_PCH_STD <algorithm> <cmath> <cstdint> <functional> <limits> <map> <memory> <optional> <set> <sstream>
    <string> <string_view> <utility> <vector>)
set(PW_PCH_JSON <nlohmann/json.hpp>)
set(PW_PCH_CATCH <catch2/catch.hpp>)
set(PW_PCH_QT <QApplication> <QComboBox> <QFormLayout> <QHBoxLayout> <QHeaderView> <QLabel> <QLineEdit>
    <QMessageBox> <QObject> <QPainter> <QPushButton> <QSpinBox> <QString> <QTableView> <QTimer> <QVBoxLayout>
    <QWidget>)

# pw_precompile(<target> <header>...): the C++ files of <target> start from these headers, precompiled once (CUDA
# files do not).
function(pw_precompile target)
  if(NOT PW_PRECOMPILED_HEADERS)
    return()
  endif()
  set(headers "")
  foreach(header ${ARGN})
    list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:${header}>")
  endforeach()
  target_precompile_headers(${target} PRIVATE ${headers})
endfunction()

# Unity builds (docs/build.md, "Build time"): CMake compiles a target's C++ files eight to a translation unit, so the
# headers, the templates they instantiate (JSON, Catch2, the standard library's containers of the project's types) and
# those instantiations' code are compiled once per eight files instead of once per file. Measured one file after the
# other on the 2-core VM: a batch of eight planner test files 51.6 -> 18.4 s, of eight pw_app files 39.5 -> 16.3 s, of
# eight planner files 38.0 -> 21.5 s. File-local names must then differ between the files of a target (a helper in
# an unnamed namespace is seen by the files after it in its batch). The asan preset builds each file alone
# (-DPW_UNITY_BUILD=OFF): a file that misses an include, or calls a helper of another file, fails there. Turn it off
# too when iterating on one file: a change recompiles its whole batch.
option(PW_UNITY_BUILD "Compile each target's C++ files in batches of eight (CMake unity builds)" ON)
set(CMAKE_UNITY_BUILD ${PW_UNITY_BUILD})
set(CMAKE_UNITY_BUILD_BATCH_SIZE 8)

# pw_link_by_file(<target>): a static library whose files compile alone in a unity build too. A program takes from a
# static library only the object files it calls into, and with them the shared libraries those objects call:
# pipewright-cli starts without libcrypto, Gloo, OpenBLAS, libssh or CUDA (issue 30 item 10; the test "the CLI loads
# no CUDA library, ...") because it takes none of pw_engine's, pw_app's and pw_protocol's objects that call them. In
# batches of eight, one call into a batch takes all eight: the unity build of pw_engine made every start load Gloo,
# its InfiniBand and Redis libraries and libcrypto.
function(pw_link_by_file target)
  set_target_properties(${target} PROPERTIES UNITY_BUILD OFF)
endfunction()
