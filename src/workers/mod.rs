//! Background workers: the loops every replica runs beside the API, each stopping on the app's
//! shutdown. [`schedules`] fires due schedule ticks, starting their runs through the engine;
//! [`webhooks`] delivers completion webhooks; [`retention`] deletes finished runs past their
//! retention; [`tasks`] moves on worker tools' tasks whose time ran out. `app.rs` starts
//! them; none answers HTTP.

pub mod retention;
pub mod schedules;
pub mod tasks;
pub mod webhooks;
