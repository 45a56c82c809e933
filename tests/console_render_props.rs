//! Drawing any view, with any overlay, at any size from 20x5 to 300x100 never panics.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common::console_fixtures;

use console_fixtures::{lab_state, with_down_source};
use gpuboard::console::headless::render;
use gpuboard::console::msg::Msg;
use gpuboard::console::state::View;
use gpuboard::console::theme::load_strict;
use gpuboard::console::update::{show_view, update};
use proptest::prelude::*;
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn any_view_any_size(w in 20u16..=300, h in 5u16..=100, view in 0usize..7, overlay in 0usize..7, down in any::<bool>(), mono in any::<bool>()) {
        let theme = load_strict(if mono { "mono" } else { "default" }, &[]).unwrap();
        let mut st = if down { with_down_source() } else { lab_state() };
        st.size = (w, h);
        let v = View::ALL[view];
        show_view(&mut st, if overlay == 3 || overlay == 6 { View::Claims } else { v });
        let key = [None, Some('c'), Some('?'), Some('r'), Some('/'), Some(':'), Some('m')][overlay];
        if let Some(c) = key {
            update(&mut st, Msg::Key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE)));
        }
        let buf = render(&st, &theme, w, h).unwrap();
        prop_assert_eq!(buf.area.width, w);
    }
}
