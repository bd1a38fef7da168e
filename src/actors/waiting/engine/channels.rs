//! The channels an engine's waiters listen on: one asked for when a waiter
//! that will wait needs it (or the policy keeps one), live once the
//! subscription is made, dropped when the last who needs it leaves (a
//! waiter's own channel with it), all but the kept ones ended when nobody
//! waits.
//!
//! Apart from `mod.rs` because this is the engine's pub/sub half: what it asks
//! of the subscriber, and what it hears back.

use super::{Effect, Engine, Policy, Scope};
use crate::actors::listen::Channel;

impl<P: Policy> Engine<P> {
    /// Its channel `name`, if it has it.
    pub(crate) fn channel_mut(&mut self, name: &str) -> Option<&mut Channel> {
        self.channels.iter_mut().find(|c| c.name() == name)
    }

    /// Every channel subscribed or asked for, each marked dropped (the actor
    /// stops).
    pub(crate) fn drop_channels(&mut self) -> Vec<String> {
        let on = self
            .channels
            .iter_mut()
            .filter_map(|c| c.off().then(|| c.name().to_owned()));
        on.collect()
    }

    /// Whether channel `name` is live; if it is not, it is asked for (once).
    pub(super) fn listening(&mut self, name: String) -> bool {
        let at = match self.channels.iter().position(|c| c.name() == name) {
            Some(at) => at,
            None => {
                self.channels.push(Channel::new(name.clone()));
                self.channels.len() - 1
            }
        };
        let channel = &mut self.channels[at];
        if channel.is_live() {
            return true;
        }
        if channel.is_off() {
            channel.mark_pending();
            self.effects.push(Effect::Subscribe(name));
        }
        false
    }

    /// A subscription is made: the queue looks again.
    pub(super) fn subscribed(&mut self, name: &str) {
        if let Some(channel) = self.channel_mut(name) {
            channel.mark_live();
        }
        self.policy.subscribed(name, &mut self.waiters);
        if P::SCOPE == Scope::All {
            // The read that follows sees what any earlier message announced.
            self.attempt.settle();
        }
        self.pump();
    }

    /// Drops channel `name`.
    pub(super) fn drop_channel(&mut self, name: &str) {
        let Some(at) = self.channels.iter().position(|c| c.name() == name) else {
            return;
        };
        let mut channel = self.channels.swap_remove(at);
        if channel.off() {
            self.effects.push(Effect::Unsubscribe(name.to_owned()));
        }
    }

    /// Every subscription ends but the one the policy keeps
    /// ([`Policy::kept_channel`]), which is made if it is not, and those it
    /// keeps listening on ([`Policy::keeps_listening`]).
    pub(super) fn unsubscribe_unkept(&mut self) {
        let kept = self.policy.kept_channel();
        let policy = &self.policy;
        let unkept = self.channels.iter_mut().filter(|c| {
            let keeps = c.is_live() && policy.keeps_listening(c.name());
            Some(c.name()) != kept.as_deref() && !keeps
        });
        let names: Vec<String> = unkept
            .filter_map(|c| c.off().then(|| c.name().to_owned()))
            .collect();
        self.effects
            .extend(names.into_iter().map(Effect::Unsubscribe));
        if let Some(name) = kept {
            self.listening(name);
        }
    }
}
