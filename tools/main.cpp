// The frameshard command-line tool: one binary, one subcommand per file.
#include "commands.h"

#include <frameshard/build_info.h>
#include <frameshard/error.h>

#ifdef FRAMESHARD_HAVE_RUNTIME
#include <c10/util/Exception.h>
#endif

#include <csignal>
#include <exception>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  // As Python does: a write to a dead peer's socket must become an error on
  // this rank (reported, exit 2), not a SIGPIPE that kills it silently.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{
      "frameshard: shard vision-tower frames across context-parallel ranks"};
  // frameshard --version: the build's facts (frameshard/build_info.h).
  std::string version = frameshard::describe(frameshard::build_info());
  version.pop_back();  // CLI11 ends the text with its own newline
  app.set_version_flag(
      "--version",
      version,
      "Print the version, git revision, torch, CUDA/NCCL and exit");
  app.require_subcommand(1);
  frameshard::cli::register_plan_command(app);
  frameshard::cli::register_analyze_command(app);
#ifdef FRAMESHARD_HAVE_RUNTIME
  frameshard::cli::register_verify_command(app);
  frameshard::cli::register_encode_command(app);
  frameshard::cli::register_train_commands(app);
  frameshard::cli::register_calibrate_command(app);
#endif
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return app.exit(e);  // a command's own exit code (verify's 1, ...)
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every other argument error is a usage
    // error: one "error: " line and exit 2 as documented (CLI11's own codes
    // run from 101 to 114).
    if (e.get_exit_code() == 0) {
      return app.exit(e);
    }
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
#ifdef FRAMESHARD_HAVE_RUNTIME
  catch (const c10::Error& e) {
    // The message names the function, the expected and the actual value;
    // c10's C++ backtrace (what()) is noise to a user.
    std::cerr << "error: " << e.what_without_backtrace() << "\n";
    return 2;
  }
#endif
  catch (const std::exception& e) {
    // frameshard::Error: the message already names the function, the
    // expected and the actual value.
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
