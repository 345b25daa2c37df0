# SPDX-License-Identifier: MIT
# Layers the build enforces (docs/build.md). Every library target exposes one include root of its own, generated
# under the build tree: `<build>/include/<target>/<folder>/...` holds a link to each *public* header of its source
# folder and nothing else. So a file of planner/ cannot include "app/..." or "ui/..." (their roots are not on its
# path), and no other folder can include a planner header marked internal. A header is internal when one of its
# first five lines contains "Internal to <folder>/" (e.g. "// Internal to planner/: ..."); such headers are for
# their own folder's sources and for white-box tests (pw_white_box).

# pw_public_headers(<target> <folder>): expose <folder>'s public headers as <target>'s PUBLIC include root.
function(pw_public_headers target folder)
  set(root ${PROJECT_BINARY_DIR}/include/${target})
  file(REMOVE_RECURSE ${root})
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE ${PROJECT_SOURCE_DIR}/${folder}
       ${PROJECT_SOURCE_DIR}/${folder}/*.h)
  set(internal "")
  foreach(header ${headers})
    file(STRINGS ${PROJECT_SOURCE_DIR}/${folder}/${header} marker LIMIT_COUNT 5 REGEX "Internal to ${folder}/")
    if(marker)
      list(APPEND internal ${header})
      continue()
    endif()
    get_filename_component(dir ${root}/${folder}/${header} DIRECTORY)
    file(MAKE_DIRECTORY ${dir})
    file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${folder}/${header} ${root}/${folder}/${header} SYMBOLIC)
  endforeach()
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)
  set_property(GLOBAL APPEND PROPERTY PW_INTERNAL_HEADERS_${folder} ${internal})
endfunction()

# pw_white_box(<target>): tests and benchmarks may include any header of the project, internal ones too.
function(pw_white_box target)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR})
endfunction()
