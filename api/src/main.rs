//! The api binary: `api` serves the HTTP API; `api admin bootstrap --account NAME` creates an
//! account (or reuses one of that name) and prints a new admin key on stdout;
//! `api admin set-concurrency --account NAME --max-concurrency N` (or `--unlimited`) sets the
//! account's concurrency cap; `api admin usage [--account NAME] [--since TIME] [--csv]` prints
//! usage by account, day and model; `api admin set-priority --account NAME --max-priority P`
//! sets the highest priority its predictions may ask for; `api admin collection put --slug S
//! --name N [--description D] --models a/b,c/d` writes a collection of models and
//! `api admin collection delete --slug S` deletes one; `api admin set-price --hardware POOL
//! --per-second DOLLARS` prices a hardware pool; `api admin set-budget --account NAME --monthly
//! DOLLARS|none` sets an account's monthly budget; `api admin render-kubernetes --kit FILE
//! [--records FILE]` prints the Cog models' pods and autoscaling ([`api::kubernetes`]);
//! `api admin rotate-master-key` seals every stored secret again under `MASTER_KEY`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use common::config::Env;

#[derive(Parser)]
#[command(name = "api", version, about = "Prediction service HTTP API")]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the HTTP API (the default).
    Serve,
    /// Operator commands.
    Admin {
        #[command(subcommand)]
        command: AdminCommand,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Build this release's MongoDB indexes and drop the ones it retires: once per release,
    /// before its services start (a new database is migrated by the first service too).
    Migrate,
    /// Seal every stored secret again under MASTER_KEY, opening what MASTER_KEY_PREVIOUS
    /// sealed; run it once every service runs with both keys, then drop the previous one.
    RotateMasterKey,
    /// Create an account (or reuse the one with this name) and print a new admin key.
    Bootstrap {
        /// The account's name.
        #[arg(long)]
        account: String,
    },
    /// Cap how many predictions of an account run at once, over every runner.
    SetConcurrency {
        /// The account's name.
        #[arg(long)]
        account: String,
        /// The most predictions of the account running at once (at least 1).
        #[arg(long, required_unless_present = "unlimited", conflicts_with = "unlimited")]
        max_concurrency: Option<u32>,
        /// Lift the account's cap.
        #[arg(long)]
        unlimited: bool,
    },
    /// Set the highest priority an account's predictions may ask for (normal by default).
    SetPriority {
        /// The account's name.
        #[arg(long)]
        account: String,
        /// high, normal or low.
        #[arg(long)]
        max_priority: common::domain::Priority,
    },
    /// Set a hardware pool's price per second (jobs that start after it pay it).
    SetPrice {
        /// The pool, as runners declare it (`RUNNER_HARDWARE`).
        #[arg(long)]
        hardware: String,
        /// US dollars per second, a decimal number such as 0.000225.
        #[arg(long)]
        per_second: String,
    },
    /// Set an account's monthly budget (past it, its creates are refused with 402).
    SetBudget {
        /// The account's name.
        #[arg(long)]
        account: String,
        /// US dollars a calendar month (UTC), such as 25.00; `none` removes the budget.
        #[arg(long)]
        monthly: String,
    },
    /// Write or delete a collection of models (`GET /v1/collections`).
    Collection {
        #[command(subcommand)]
        command: CollectionCommand,
    },
    /// Print the Kubernetes kit of the Cog models: their pods and KEDA autoscaling, from the
    /// kit's declaration and the service's records.
    RenderKubernetes {
        /// The declaration: images, hardware pools, models (deploy/k8s/kit.yaml).
        #[arg(long)]
        kit: std::path::PathBuf,
        /// Render for the records in this JSON file instead of the store's (offline).
        #[arg(long)]
        records: Option<std::path::PathBuf>,
    },
    /// Print the usage of every account (or one) by day and model.
    Usage {
        /// Only this account (by name).
        #[arg(long)]
        account: Option<String>,
        /// From this time (RFC 3339; 30 days ago by default).
        #[arg(long)]
        since: Option<String>,
        /// CSV, with the account's name first.
        #[arg(long)]
        csv: bool,
    },
}

#[derive(Subcommand)]
enum CollectionCommand {
    /// Make a collection, or replace it whole.
    Put {
        /// Its address: a-z, 0-9 and '-'.
        #[arg(long)]
        slug: String,
        /// Its name, for people.
        #[arg(long)]
        name: String,
        /// What it gathers.
        #[arg(long, default_value = "")]
        description: String,
        /// Its models, `owner/name` each, comma-separated, in order.
        #[arg(long, value_delimiter = ',')]
        models: Vec<String>,
    },
    /// Delete a collection.
    Delete {
        /// Its address.
        #[arg(long)]
        slug: String,
    },
}

/// mimalloc rather than glibc's malloc, whose bookkeeping (`malloc_consolidate`, `unlink_chunk`)
/// was a tenth of the service's CPU in its profile.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    common::runtime::block_on(serve())
}

async fn serve() -> ExitCode {
    let cli = Cli::parse();
    let _telemetry = common::telemetry::init("api");
    // Rendering for a records file needs no store, so none of its settings.
    if let Some(Command::Admin { command: AdminCommand::RenderKubernetes { kit, records: Some(records) } }) =
        &cli.command
    {
        return match api::admin::render_kubernetes(None, kit, Some(records)).await {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                tracing::error!("{e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let config = match api::config::ApiConfig::from_env(&Env::process()) {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => common::runtime::on_workers(api::run(config, common::shutdown::on_signals())).await,
        Command::Admin { command: AdminCommand::Migrate } => api::admin::migrate(&config).await.map(|()| {
            eprintln!("indexes migrated: index set {}", common::store::migrations::INDEX_SET);
        }),
        Command::Admin { command: AdminCommand::RotateMasterKey } => {
            api::admin::rotate_master_key(&config).await.and_then(|done| {
                eprintln!(
                    "sealed again under the new key: the signing secrets of {} accounts, {} API keys, \
                     the secret inputs of {} predictions",
                    done.signing_secrets, done.api_keys, done.secret_inputs
                );
                if done.unreadable.is_empty() {
                    eprintln!("nothing is left under the previous key: MASTER_KEY_PREVIOUS can be removed");
                    Ok(())
                } else {
                    anyhow::bail!(
                        "{} records hold values neither key opens (keep both keys until they are dealt with): {}",
                        done.unreadable.len(),
                        done.unreadable.join(", ")
                    )
                }
            })
        }
        Command::Admin { command: AdminCommand::Bootstrap { account } } => {
            api::admin::bootstrap(&config, &account).await.map(|done| {
                eprintln!(
                    "account {} ({}) {}; admin key {} issued",
                    done.account.name,
                    done.account.id,
                    if done.created { "created" } else { "already existed" },
                    done.key.prefix()
                );
                println!("{}", done.key.expose());
            })
        }
        Command::Admin { command: AdminCommand::SetConcurrency { account, max_concurrency, unlimited: _ } } => {
            api::admin::set_max_concurrency(&config, &account, max_concurrency).await.map(|account| {
                match account.max_concurrency {
                    Some(n) => {
                        eprintln!("account {} ({}) runs at most {n} predictions at once", account.name, account.id)
                    }
                    None => eprintln!("account {} ({}) has no concurrency cap", account.name, account.id),
                }
            })
        }
        Command::Admin { command: AdminCommand::SetPriority { account, max_priority } } => {
            api::admin::set_max_priority(&config, &account, max_priority).await.map(|account| {
                eprintln!("account {} ({}) may ask for {max_priority} priority at most", account.name, account.id)
            })
        }
        Command::Admin { command: AdminCommand::SetPrice { hardware, per_second } } => {
            api::admin::set_price(&config, &hardware, &per_second)
                .await
                .map(|price| eprintln!("hardware {hardware} now costs ${price} a second, for jobs that start from now"))
        }
        Command::Admin { command: AdminCommand::SetBudget { account, monthly } } => {
            api::admin::set_budget(&config, &account, &monthly).await.map(|(account, budget)| match budget {
                Some(b) => eprintln!("account {} ({}) has a monthly budget of ${b}", account.name, account.id),
                None => eprintln!("account {} ({}) has no monthly budget", account.name, account.id),
            })
        }
        Command::Admin {
            command: AdminCommand::Collection { command: CollectionCommand::Put { slug, name, description, models } },
        } => api::admin::put_collection(&config, &slug, &name, &description, &models).await.map(|c| {
            eprintln!("collection {} ({}) holds {} models", c.slug, c.name, c.models.len());
        }),
        Command::Admin { command: AdminCommand::Collection { command: CollectionCommand::Delete { slug } } } => {
            api::admin::delete_collection(&config, &slug).await.map(|()| eprintln!("collection {slug} deleted"))
        }
        Command::Admin { command: AdminCommand::RenderKubernetes { kit, records } } => {
            api::admin::render_kubernetes(Some(&config), &kit, records.as_deref()).await.map(|text| print!("{text}"))
        }
        Command::Admin { command: AdminCommand::Usage { account, since, csv } } => {
            api::admin::usage(&config, account.as_deref(), since.as_deref(), csv).await.map(|out| print!("{out}"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}
