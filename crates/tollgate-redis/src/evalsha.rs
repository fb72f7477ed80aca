//! How a script is called: `EVALSHA` by its hash, the script loaded after
//! `NOSCRIPT`, and its whole text sent (`EVAL`) where loading cannot reach.

use redis::{
    Cmd, ErrorKind, FromRedisValue, RedisError, RedisResult, Script, ServerErrorKind, ToRedisArgs,
    Value,
};

use crate::replicas::ReplicaWait;

/// A Lua script with its text kept: redis-rs's [`Script`] keeps it
/// private, and the `EVAL` of [`Evalsha::run`]'s last resort needs it.
pub(crate) struct LuaScript {
    text: &'static str,
    script: Script,
}

impl LuaScript {
    /// The script of `text` (one of [`crate::scripts`]' texts).
    pub(crate) fn new(text: &'static str) -> Self {
        Self {
            text,
            script: Script::new(text),
        }
    }

    /// Its SHA1, which `EVALSHA` names it by.
    pub(crate) fn hash(&self) -> &str {
        self.script.get_hash()
    }
}

/// A script's `EVALSHA` with its keys and arguments, written straight into
/// one command (redis-rs's `ScriptInvocation` keeps its own copy of every
/// key and argument first: an allocation each, on every decision).
pub(crate) struct Evalsha<'a> {
    script: &'a LuaScript,
    command: Cmd,
}

impl<'a> Evalsha<'a> {
    /// `script` with `keys` keys, which the first `keys` calls of
    /// [`Evalsha::arg`] must give, then its arguments; room for `words`
    /// keys and arguments in all (more may follow).
    pub(crate) fn new(script: &'a LuaScript, keys: usize, words: usize) -> Self {
        // Keys and numbers are mostly under 24 bytes.
        let mut command = Cmd::with_capacity(3 + words, 64 + 24 * words);
        command.arg("EVALSHA").arg(script.hash()).arg(keys);
        Self { script, command }
    }

    /// Appends a key or an argument.
    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.command.arg(arg);
        self
    }

    /// Sends it; after `NOSCRIPT` (a Redis that restarted or flushed its
    /// scripts), loads the script and sends it once more, as redis-rs's
    /// `ScriptInvocation::invoke_async` does. Should that meet `NOSCRIPT`
    /// again, sends the script's text (`EVAL`): in a cluster, a slot moving
    /// to a node just added sends its calls there (`ASK`), and `SCRIPT
    /// LOAD`, which the cluster client sends to the masters that own slots,
    /// never reaches it. `NOSCRIPT` ran nothing, so each resend is the
    /// call's first run.
    pub(crate) async fn run<C, T>(&self, connection: &mut C) -> RedisResult<T>
    where
        C: redis::aio::ConnectionLike,
        T: FromRedisValue,
    {
        match self.command.query_async(connection).await {
            Err(e) if is_no_script(&e) => {
                self.script.script.load_async(connection).await?;
                match self.command.query_async(connection).await {
                    Err(e) if is_no_script(&e) => self.eval().query_async(connection).await,
                    answer => answer,
                }
            }
            answer => answer,
        }
    }

    /// Sends it, then `WAIT` for `wait`'s replicas, in one pipeline on one
    /// connection: a `WAIT` sent on its own could go out on a new
    /// connection (after a reconnect), which has written nothing and so is
    /// acknowledged at once. Loads the script after `NOSCRIPT`, and sends
    /// its text after a second one, as [`Evalsha::run`] does: the `WAIT`
    /// behind the refused script has waited for the connection's earlier
    /// writes, so with replicas that lag the call sent again may start
    /// past its deadline (and write nothing). The script's reply, and
    /// `WAIT`'s answer or refusal (an ACL without `WAIT`): the script ran
    /// either way.
    pub(crate) async fn run_acked<C, T>(
        &self,
        connection: &mut C,
        wait: ReplicaWait,
    ) -> RedisResult<(T, RedisResult<u64>)>
    where
        C: redis::aio::ConnectionLike,
        T: FromRedisValue,
    {
        let acked = |command: Cmd| {
            let mut pipeline = redis::pipe();
            pipeline
                .ignore_errors()
                .add_command(command)
                .cmd("WAIT")
                .arg(wait.replicas)
                .arg(wait.timeout_ms);
            pipeline
        };
        let mut replies: Vec<Value> = acked(self.command.clone()).query_async(connection).await?;
        if first_is_no_script(&replies) {
            self.script.script.load_async(connection).await?;
            replies = acked(self.command.clone()).query_async(connection).await?;
            if first_is_no_script(&replies) {
                replies = acked(self.eval()).query_async(connection).await?;
            }
        }
        let [reply, acknowledged] = <[Value; 2]>::try_from(replies).map_err(|replies| {
            RedisError::from((
                ErrorKind::UnexpectedReturnType,
                "a script and WAIT answered",
                format!("{} replies", replies.len()),
            ))
        })?;
        let reply = T::from_redis_value(reply.extract_error()?)?;
        let acknowledged = acknowledged
            .extract_error()
            .and_then(|count| Ok(u64::from_redis_value(count)?));
        Ok((reply, acknowledged))
    }

    /// The same call as `EVAL` with the script's text.
    fn eval(&self) -> Cmd {
        let mut eval = Cmd::new();
        eval.arg("EVAL").arg(self.script.text);
        // Every argument is simple: [`Evalsha::arg`] adds no cursor.
        for arg in self.command.args_iter().skip(2) {
            if let redis::Arg::Simple(bytes) = arg {
                eval.arg(bytes);
            }
        }
        eval
    }
}

fn is_no_script(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

fn first_is_no_script(replies: &[Value]) -> bool {
    matches!(replies.first(), Some(Value::ServerError(e)) if e.kind() == Some(ServerErrorKind::NoScript))
}
