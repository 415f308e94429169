#include <memory>
#include <string>

#include "cli/commands.h"
#include "fmt/format.h"
#include "fmt/ostream.h"
#include "models/models.h"
#include "nlohmann/json.hpp"
#include "session/option_flags.h"

namespace spillway::cli {

CommandRunner AddModelsCommand(CLI::App& app) {
  CLI::App* command = app.add_subcommand("models", "List the built-in models and their options");
  auto json = std::make_shared<bool>(false);
  command->add_flag("--json", *json, "Print the list as JSON");
  return [command, json](std::ostream& out) -> absl::Status {
    if (!command->parsed()) return absl::OkStatus();
    const std::vector<models::ModelInfo> list = models::ListModels();
    if (*json) {
      nlohmann::json result = nlohmann::json::array();
      for (const models::ModelInfo& model : list) {
        nlohmann::json options = nlohmann::json::array();
        for (const models::ModelOptionInfo& option : model.options) {
          options.push_back({{"name", option.name},
                             {"flag", std::string(session::ModelOptionFlag(option.name))},
                             {"default", option.default_value},
                             {"description", option.description}});
        }
        result.push_back(
            {{"name", model.name}, {"description", model.description}, {"options", options}});
      }
      out << result.dump(2) << "\n";
      return absl::OkStatus();
    }
    for (const models::ModelInfo& model : list) {
      fmt::print(out, "{:<15} {}\n", model.name, model.description);
      for (const models::ModelOptionInfo& option : model.options) {
        fmt::print(out, "    {:<16} {} (default {})\n", session::ModelOptionFlag(option.name),
                   option.description, option.default_value);
      }
    }
    return absl::OkStatus();
  };
}

}  // namespace spillway::cli
