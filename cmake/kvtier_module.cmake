# Module boundaries: what a target may #include follows what it links.
#
# Every target sees include/ (the public API, `#include "kvtier/x.h"`). A module's internal
# headers keep the spelling `#include "<module>/x.h"`, but src/ is not on any include path:
# each module gets its own include root in the build tree holding a single link
# `<module> -> src/<module>`, added PUBLIC to the module's targets. So `"quant/blocks.h"`
# resolves only in targets that link kvtier_quant (directly, or through a PUBLIC dependency),
# and tests beside the code see their module the same way. Which internal headers a module may
# name, and in which order modules stand, is checked by tools/check_layering.py against the
# table in docs/architecture.md (ctest label `layering`).

# kvtier_module_include_root(MODULE): the include root holding `MODULE -> src/MODULE`.
function(kvtier_module_include_root module out_var)
  set(root "${PROJECT_BINARY_DIR}/module_include/${module}")
  if(NOT IS_SYMLINK "${root}/${module}")
    if(NOT EXISTS "${PROJECT_SOURCE_DIR}/src/${module}")
      message(FATAL_ERROR "kvtier_module: no src/${module}")
    endif()
    file(MAKE_DIRECTORY "${root}")
    file(CREATE_LINK "${PROJECT_SOURCE_DIR}/src/${module}" "${root}/${module}" SYMBOLIC)
  endif()
  set(${out_var} "${root}" PARENT_SCOPE)
endfunction()

# kvtier_module(TARGET MODULE): TARGET belongs to src/MODULE: it sees include/ and MODULE's
# internal headers, and so does everything that links it.
function(kvtier_module target module)
  kvtier_module_include_root(${module} root)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    set(scope PRIVATE)  # nothing links an executable
  elseif(type STREQUAL "INTERFACE_LIBRARY")
    set(scope INTERFACE)  # header-only
  else()
    set(scope PUBLIC)
  endif()
  target_include_directories(${target} ${scope} "${PROJECT_SOURCE_DIR}/include" "${root}")
endfunction()
