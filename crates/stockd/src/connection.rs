//! `--url` / `STOCKD_URL` and `--token` / `STOCKD_TOKEN`: where a stockd server is and the bearer
//! token to send it. One argument group, [`Connection`], flattened into every command that talks
//! to a server: the client commands (pool, hold, lock, batch, events), `stockd bench run`,
//! `stockd sink postgres` and `stockd reconcile`. Each says through a [`Caller`] what its token
//! must be and whether it takes a fleet of servers; the flags, variables, default and the rest
//! of the help are the group's.
//!
//! This module only reads the two settings and notes where each came from (a flag, the
//! environment or the default), so that a message can name the one to change; it never checks
//! a URL (each command does, as its client needs) nor talks to a server.

use std::marker::PhantomData;

/// The server a command talks to when neither `--url` nor `STOCKD_URL` is given: `stockd
/// serve`'s default `--listen`.
pub const URL_DEFAULT: &str = "http://127.0.0.1:7070";
pub const URL_FLAG: &str = "--url";
pub const URL_VARIABLE: &str = "STOCKD_URL";
pub const TOKEN_FLAG: &str = "--token";
pub const TOKEN_VARIABLE: &str = "STOCKD_TOKEN";

/// What a command needs of its connection, for the help of its `--url` and `--token`.
pub trait Caller {
    /// What the token must be: the role the command's requests need.
    const TOKEN_ROLE: &'static str;
    /// What follows the help of `--url`; for a fleet, how to give it.
    const URL_MORE: &'static str = "";
    /// Whether `--url` takes several servers, the flag repeated or comma separated.
    const FLEET: bool = false;
}

/// The client commands: pool, hold, lock, batch, events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForClient {}

impl Caller for ForClient {
    const TOKEN_ROLE: &'static str = "an admin token for pool writes";
}

/// `stockd bench run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForBench {}

impl Caller for ForBench {
    const TOKEN_ROLE: &'static str =
        "an admin token when the server has tokens: the bench creates its pools";
    const URL_MORE: &'static str = ". Several (the flag repeated, or comma separated): a fleet \
        of servers on one backend, the connections spread over them in turn; set-up and the \
        verdict go through the first";
    const FLEET: bool = true;
}

/// `stockd sink postgres` and `stockd reconcile`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForSink {}

impl Caller for ForSink {
    const TOKEN_ROLE: &'static str = "for stockd: a client token is enough";
    const URL_MORE: &'static str = "; any server of a fleet";
}

/// Where the server is and the token to send it, as `C`'s command was given them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection<C> {
    /// The servers' base URLs: one, unless `C` takes a fleet.
    pub urls: Vec<String>,
    /// As given; [`Connection::bearer_token`] is what to send.
    pub token: Option<String>,
    pub url_origin: Origin,
    pub token_origin: Origin,
    caller: PhantomData<C>,
}

impl<C> Connection<C> {
    /// The server's base URL (a fleet's first).
    pub fn url(&self) -> &str {
        self.urls.first().map_or("", String::as_str)
    }

    /// The token to send: an empty STOCKD_TOKEN means "no token", not "send an empty bearer
    /// token".
    pub fn bearer_token(&self) -> Option<String> {
        self.token.clone().filter(|token| !token.is_empty())
    }

    /// A client of the server, with the token.
    pub fn client(&self) -> stockd_client::Client {
        stockd_client::Client::new(self.url(), self.bearer_token())
    }

    /// Where the URL came from: `--url`, `STOCKD_URL` or `the default --url`.
    pub fn url_source(&self) -> String {
        self.url_origin.name(URL_FLAG, URL_VARIABLE)
    }

    /// Where the token came from: `--token`, `STOCKD_TOKEN` or `the default --token`.
    pub fn token_source(&self) -> String {
        self.token_origin.name(TOKEN_FLAG, TOKEN_VARIABLE)
    }

    /// How to give `url` instead, the way the URL was given: `--url URL` or `STOCKD_URL=URL`.
    pub fn url_instead(&self, url: &str) -> String {
        self.url_origin.assignment(URL_FLAG, URL_VARIABLE, url)
    }
}

impl<C: Caller> clap::Args for Connection<C> {
    fn augment_args(command: clap::Command) -> clap::Command {
        let url = clap::Arg::new("url")
            .long("url")
            .env(URL_VARIABLE)
            .value_name("URL")
            .default_value(URL_DEFAULT)
            .global(true)
            .help(format!(
                "Base URL of the stockd server: http://HOST:PORT, or https://HOST[:PORT] through \
                 a TLS proxy (trusting the system's CAs, or those of SSL_CERT_FILE or \
                 SSL_CERT_DIR when set){}",
                C::URL_MORE
            ));
        let url = if C::FLEET {
            url.action(clap::ArgAction::Append).value_delimiter(',')
        } else {
            url.action(clap::ArgAction::Set)
        };
        let token = clap::Arg::new("token")
            .long("token")
            .env(TOKEN_VARIABLE)
            .hide_env_values(true)
            .value_name("TOKEN")
            .global(true)
            .action(clap::ArgAction::Set)
            .help(format!("Bearer token ({})", C::TOKEN_ROLE));
        command.arg(url).arg(token)
    }

    fn augment_args_for_update(command: clap::Command) -> clap::Command {
        Self::augment_args(command)
    }
}

impl<C> clap::FromArgMatches for Connection<C> {
    fn from_arg_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        Ok(Connection {
            urls: matches
                .get_many::<String>("url")
                .map(|urls| urls.cloned().collect())
                .unwrap_or_default(),
            token: matches.get_one::<String>("token").cloned(),
            url_origin: Origin::of(matches, "url"),
            token_origin: Origin::of(matches, "token"),
            caller: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &clap::ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

/// Where a setting came from, so that a message names the one to change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Origin {
    #[default]
    Default,
    Flag,
    Environment,
}

impl Origin {
    fn of(matches: &clap::ArgMatches, id: &str) -> Origin {
        match matches.value_source(id) {
            Some(clap::parser::ValueSource::CommandLine) => Origin::Flag,
            Some(clap::parser::ValueSource::EnvVariable) => Origin::Environment,
            _ => Origin::Default,
        }
    }

    /// `--url`, `STOCKD_URL` or `the default --url`.
    fn name(self, flag: &str, variable: &str) -> String {
        match self {
            Origin::Flag => flag.to_owned(),
            Origin::Environment => variable.to_owned(),
            Origin::Default => format!("the default {flag}"),
        }
    }

    /// How to give `value` to this setting: `--url VALUE` or `STOCKD_URL=VALUE`.
    fn assignment(self, flag: &str, variable: &str, value: &str) -> String {
        match self {
            Origin::Environment => format!("{variable}={value}"),
            Origin::Flag | Origin::Default => format!("{flag} {value}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser)]
    struct Bench {
        #[command(flatten)]
        connection: Connection<ForBench>,
    }

    #[derive(clap::Parser)]
    struct Sink {
        #[command(flatten)]
        connection: Connection<ForSink>,
    }

    #[test]
    fn a_fleet_takes_several_urls_and_the_others_one() {
        use clap::Parser;
        let bench = Bench::try_parse_from(["bench", "--url", "http://a:1,http://b:2"]).unwrap();
        assert_eq!(bench.connection.urls, ["http://a:1", "http://b:2"]);
        assert_eq!(bench.connection.url(), "http://a:1");
        let sink = Sink::try_parse_from(["sink", "--url", "http://a:1,b"]).unwrap();
        assert_eq!(sink.connection.urls, ["http://a:1,b"]);
        assert!(
            Sink::try_parse_from(["sink", "--url", "http://a:1", "--url", "http://b:2"]).is_err()
        );
        let default = Sink::try_parse_from(["sink", "--token", ""])
            .unwrap()
            .connection;
        assert_eq!(
            (default.url(), default.url_origin, default.bearer_token()),
            (URL_DEFAULT, Origin::Default, None)
        );
    }

    #[test]
    fn sources_name_the_flag_or_the_variable() {
        assert_eq!(Origin::Flag.name("--url", "STOCKD_URL"), "--url");
        assert_eq!(
            Origin::Environment.name("--url", "STOCKD_URL"),
            "STOCKD_URL"
        );
        assert_eq!(
            Origin::Default.name("--url", "STOCKD_URL"),
            "the default --url"
        );
        assert_eq!(
            Origin::Environment.assignment("--url", "STOCKD_URL", "http://h:1"),
            "STOCKD_URL=http://h:1"
        );
        assert_eq!(
            Origin::Default.assignment("--url", "STOCKD_URL", "http://h:1"),
            "--url http://h:1"
        );
    }
}
