# Warnings for our own targets only; third-party headers come in as system
# includes. FRAMESHARD_WERROR (CI) turns them into errors.
function(frameshard_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic
                         -Wno-unused-parameter)
  if(FRAMESHARD_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
